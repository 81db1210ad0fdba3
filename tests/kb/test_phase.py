"""The phase of an error comes from the traceback and the log, not from nearby words.

Real shapes: frames above the error, an error printed before its traceback, interleaved
workers, milestones only, and non-memory errors raised inside a start-up phase.
"""

from __future__ import annotations

import pytest

from bot.diagnose import diagnose
from bot.kb.loader import KB, load_kb
from bot.schema import Diagnosis, Evidence

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
       "total capacity of 23.56 GiB of which 21.75 MiB is free.")


def frames(*names: str) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "/usr/lib/python3.12/site-packages/vllm/x.py", line 1, in {n}\n    x()\n'
        for n in names)


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


def run(kb: KB, text: str) -> Diagnosis:
    return diagnose(Evidence(text=text), kb)


@pytest.mark.parametrize(("stack", "problem", "phase"), [
    (("load_model", "load_weights", "weight_loader"), "oom-loading-weights", "loading"),
    (("determine_available_memory", "profile_run", "_dummy_run"),
     "oom-during-startup-profiling", "profiling"),
    # capture runs a dummy forward pass: the capture frame decides
    (("compile_or_warm_up_model", "capture_model", "_dummy_run"),
     "oom-during-startup-profiling", "cuda-graph"),
    (("run_busy_loop", "step", "execute_model"), "oom-under-load", "serving"),
    # the V0 profile run calls execute_model: profiling, not serving
    (("determine_num_available_blocks", "profile_run", "execute_model"),
     "oom-during-startup-profiling", "profiling"),
])
def test_frames_above_the_error_decide(kb: KB, stack: tuple[str, ...], problem: str,
                                       phase: str) -> None:
    d = run(kb, frames(*stack) + OOM + "\n")
    assert d.top is not None and (d.top.id, d.top.phase) == (problem, phase)


def test_torch_moving_a_module_onto_the_device_is_loading(kb: KB) -> None:
    """ipex-llm#12584: `model.to(device)` runs torch's module `convert`; an XPU (not only a
    CUDA) device out of memory there is a loading OOM."""
    text = ('  File "/usr/lib/python3.11/dist-packages/torch/nn/modules/module.py", line 1158,'
            " in convert\n    return t.to(device, dtype if t.is_floating_point() else None)\n"
            "RuntimeError: XPU out of memory. Tried to allocate 1.02 GiB (GPU 0; 15.56 GiB total "
            "capacity; 0 bytes already allocated; 0 bytes reserved in total by PyTorch)\n")
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == ("oom-loading-weights", "loading")


def test_an_error_printed_before_its_traceback(kb: KB) -> None:
    # vllm#3407: "Future exception was never retrieved", the OOM first, the frames below
    text = ("Future exception was never retrieved\nfuture: <Future finished exception="
            f"OutOfMemoryError('{OOM}')>\n"
            + frames("run_engine_loop", "_raise_exception_on_finish"))
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == ("oom-under-load", "serving")


def test_another_workers_frames_do_not_decide(kb: KB) -> None:
    a, b = "(VllmWorker rank=0 pid=10) ", "(VllmWorker rank=1 pid=11) "
    text = ("".join(a + line + "\n" for line in frames("execute_model").splitlines())
            + "".join(b + line + "\n" for line in frames("load_model").splitlines())
            + b + OOM + "\n")
    d = run(kb, text)
    assert d.top is not None and d.top.id == "oom-loading-weights"


def test_milestones_place_a_bare_error(kb: KB) -> None:
    text = ("INFO 11-18 18:05:02 [gpu_model_runner.py:1] Model loading took 14.99 GiB\n"
            "INFO 11-18 18:05:09 [gpu_model_runner.py:2] Capturing CUDA graph shapes: 40%\n"
            + OOM + "\n")
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == (
        "oom-during-startup-profiling", "cuda-graph")
    served = "INFO [loggers.py:118] Engine 000: Avg prompt throughput: 1843.2 tokens/s\n" + OOM
    d = run(kb, served)
    assert d.top is not None and d.top.id == "oom-under-load"


def test_words_in_prose_are_not_frames(kb: KB) -> None:
    # "load_model" said in a sentence is not a frame: the OOM stays unplaced (start-up)
    text = "I think load_model is where it happens\n" + OOM
    d = run(kb, text)
    assert d.top is not None and d.top.id == "oom-during-startup-profiling"
    assert d.top.phase is None


@pytest.mark.parametrize("text", [
    # sglang#4205: graph capture wrapping a closed gloo connection
    frames("init_cuda_graphs", "CudaGraphRunner")
    + "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534]"
      " Connection closed by peer [10.0.0.2]:1234\n",
    # vllm#10151: no kernel image during the profile run
    frames("determine_num_available_blocks", "profile_run")
    + "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
])
def test_a_non_memory_error_in_a_start_up_phase_is_not_memory(kb: KB, text: str) -> None:
    d = run(kb, text)
    memory = {p.id for p in d.problems if kb.problems[p.id].memory_problem}
    assert d.problems and not memory, [p.id for p in d.problems]


@pytest.mark.parametrize(("said", "problem", "phase"), [
    # sglang#10408: "runs fine for a few minutes, then crashes"
    ("SGLang runs fine for a few minutes, then crashes with this", "oom-under-load", "serving"),
    # verl#632: the rollout engine woken up for the next step
    ("It OOMs when the rollout worker is woken up at the beginning of the second step",
     "oom-under-load", "serving"),
    ("It always fails while loading the model on our A10", "oom-loading-weights", "loading"),
    # tilcodes.fly.dev: a server that ran for hours, then OOMed "under normal load"
    ("The OOM happened suddenly, under normal load. No spike in traffic",
     "oom-under-load", "serving"),
    # Qwen3-VL#1738: "vLLM started fine and served; after long use memory grew until OOM" -
    # a start that went well does not place the OOM at start-up
    ("vllm启动正常，并且可以调用服务。但是访问时间长了之后发现显存逐渐增加直到最后OOM",
     "oom-under-load", "serving"),
    # ai-muninn.com: "failing with an OOM error during model load"
    ("Every restart had about a 50% chance of failing with an OOM error during model load",
     "oom-loading-weights", "loading"),
    # a description runs in time order: the last phase named is where it failed
    ("It served traffic for weeks; since the upgrade it fails at startup",
     "oom-during-startup-profiling", "startup"),
    # two phases in one sentence: the narrower is where it failed (aixcl#694)
    ("Error: CUDA graph capture fails during profiling", "oom-during-startup-profiling",
     "cuda-graph"),
])
def test_the_users_words_place_an_error_the_log_does_not(kb: KB, said: str, problem: str,
                                                          phase: str) -> None:
    d = run(kb, said + ":\n" + OOM + "\n")
    assert d.top is not None and (d.top.id, d.top.phase) == (problem, phase)


@pytest.mark.parametrize("said", [
    # vllm#43951: the phase named after the failure, then denied
    "It OOMs during weight loading, at cumem_allocator.cpp. `Profiling CUDA graph memory` is "
    "never reached",
    # torch's own OOM text names CUDA graphs as an example of a private pool
    "It OOMs while loading weights, 71.20 GiB allocated in private pools (e.g., CUDA Graphs)",
])
def test_a_phase_the_sentence_denies_or_gives_as_an_example_places_nothing(kb: KB,
                                                                          said: str) -> None:
    d = run(kb, said + ":\n" + OOM + "\n")
    assert d.top is not None and (d.top.id, d.top.phase) == ("oom-loading-weights", "loading")


def test_torchs_asynchronous_report_hint_names_no_phase(kb: KB) -> None:
    """vllm#2348: 'might be asynchronously reported at some other API call' is torch's advice
    under every CUDA error, not a user saying the OOM came with an API call (serving)."""
    text = ("RuntimeError: CUDA error: out of memory\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.\n")
    d = run(kb, text)
    assert d.top is not None and d.top.id == "oom-during-startup-profiling"
    assert d.top.phase != "serving"


def test_an_oom_said_after_the_weights_loaded_is_a_start_up_one(kb: KB) -> None:
    """sglang#1439: 'OOM issues, after all safetensors checkpoints have been loaded' places
    the failure after loading, though another sentence talks of what inference needs."""
    text = ("Theoretically, speaking, this is plenty of VRAM for 405B, FP8, given that I only "
            "need 405GB VRAM total +/- 50GB during inference. However, I keep running into OOM "
            "issues, after all safetensors checkpoints have been loaded, which does not seem to "
            "make much sense to me.\n")
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == (
        "oom-during-startup-profiling", "profiling")


def test_a_phrase_inside_another_word_places_nothing(kb: KB) -> None:
    """Qwen2-57B-A14B-Instruct discussion 3: 'a call' (serving) is not said in 'cuda call
    failed'; the OOM on running the server's command stays a start-up one."""
    text = ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2-57B-A14B-Instruct\n"
            "报错:cuda out of memory\n"
            "cuda call failed lazily at initialization with error: device >=0 && device < "
            "num_gpus INTERNAL ASSERT FAILED\n")
    d = run(kb, text)
    assert d.top is not None and d.top.phase != "serving"


@pytest.mark.parametrize(("text", "problem", "phase"), [
    # trl#2776: the optimizer step of a GRPO run
    ('  File "/envs/torch/lib/python3.10/site-packages/torch/optim/adamw.py", line 220, in '
     "step\n    adamw(\n" + OOM + "\n", "oom-under-load", "serving"),
    # MOSS-TTSD#71: the error body a request got back
    ('{"error":{"message":"CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total '
     'capacity of 23.53 GiB of which 20.38 MiB is free."}}\n', "oom-under-load", "serving"),
    # TinyZero#64: runs a few minutes, then OOMs
    ("With model Qwen2.5-3B, export N_GPUS=4, GPU runs a few min, then GPU oom\n",
     "oom-under-load", "serving"),
])
def test_a_training_step_or_a_request_s_error_body_is_under_load(kb: KB, text: str,
                                                                 problem: str,
                                                                 phase: str) -> None:
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == (problem, phase)


def test_frames_and_milestones_outrank_the_users_words(kb: KB) -> None:
    text = "It crashes under load after a while:\n" + frames("load_model", "load_weights") + OOM
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == ("oom-loading-weights", "loading")
    # the error quoted first, the log below it: the log's last milestone places it
    text = ("It fails when loading the model, here is the error:\n" + OOM + "\n"
            "INFO 11-18 18:05:02 [loggers.py:118] Engine 000: Avg prompt throughput: 1843.2 "
            "tokens/s, Avg generation throughput: 12.0 tokens/s\n")
    d = run(kb, text)
    assert d.top is not None and (d.top.id, d.top.phase) == ("oom-under-load", "serving")


@pytest.mark.parametrize(("line", "phase"), [
    # raised only while the KV cache is sized, whatever the paste shows around it
    ("ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", "profiling"),
    ("WARNING 05-02 10:00:00 scheduler.py:1057] Sequence group 12 is preempted by "
     "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.", "serving"),
    ("ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU "
     "memory utilization (0.95, 45.01 GiB).", "startup"),
])
def test_a_symptom_that_implies_its_phase(kb: KB, line: str, phase: str) -> None:
    assert run(kb, line + "\n").facts.phase == phase


@pytest.mark.parametrize("order", ["traceback last", "traceback first"])
def test_a_method_named_on_the_line_that_starts_a_traceback_decides(kb: KB, order: str) -> None:
    # vllm#7800: the worker names its method and starts the traceback on one line; the phase
    # must not depend on the order the scanner hands over what it found in the line
    from bot.kb.phase import TRACEBACK, PhaseMarkers, PhaseTracker

    line = ("(VllmWorkerProcess pid=232) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226] "
            "Exception in worker VllmWorkerProcess while processing method init_device: NCCL "
            "error: unhandled system error, Traceback (most recent call last):")
    tracker = PhaseTracker(PhaseMarkers(kb.phases))
    found = ["init_device", TRACEBACK]
    tracker.see(line, 1, found if order == "traceback last" else found[::-1])
    assert tracker.phase_at(line, 1) == "startup"
