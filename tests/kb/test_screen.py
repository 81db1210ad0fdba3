"""What the log's own figures decide over its lines (knowledge/problems: `ruled_out_by`,
`implied_by`): an OOM that is no shortage is set aside with the reason, and a check whose error
line was cut is still named from the figures it failed on, unless a line names a failure."""

from __future__ import annotations

import pytest

from bot.diagnose import diagnose
from bot.kb.loader import KB, load_kb
from bot.schema import Diagnosis, Evidence

# ms-swift#9613: vLLM's sleep-mode allocator refusing 20 MiB with 66 GiB free
SLEEP_MODE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 7 has a total "
    "capacity of 79.11 GiB of which 66.43 GiB is free. Including non-PyTorch memory, this process "
    "has 0 bytes memory in use. Of the allocated memory 8.51 GiB is allocated by PyTorch, and "
    "856.16 MiB is reserved by PyTorch but unallocated.\n")
# Qwen3#67: the same message when the GPU really is full
FULL_GPU_OOM = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a "
    "total capacty of 79.33 GiB of which 351.81 MiB is free. Including non-PyTorch memory, this "
    "process has 78.97 GiB memory in use.\n")
# FastChat#3177: V0 sized 1,842 blocks for max_seq_len 32768; the ValueError was cut
CUT_V0_CHECK = (
    "INFO 03-20 19:18:21 llm_engine.py:72] Initializing an LLM engine with config: "
    "model='/data/models/qwen1.5-4b-chat', tokenizer='/data/models/qwen1.5-4b-chat', "
    "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=True, "
    "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, "
    "tensor_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
    "enforce_eager=True, kv_cache_dtype=auto, seed=0)\n"
    "INFO 03-20 19:18:27 llm_engine.py:322] # GPU blocks: 1842, # CPU blocks: 655\n"
    "2024-03-20 19:18:27 | ERROR | stderr | Traceback (most recent call last):\n")
# GLM-4#510: bf16 in the engine's config on a V100, the ValueError only in the thread's title
BF16_ON_V100 = (
    "gpu V100 32G 显存。\n"
    "INFO 08-27 14:00:04 llm_engine.py:174] Initializing an LLM engine (v0.5.4) with config: "
    "model='/data/ChatGLM-6B/conf/models/glm-4-9b-chat', dtype=torch.bfloat16, max_seq_len=8192\n")
# a failure the paste names outright decides, whatever the figures around it
NCCL_LINE = ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for "
             "details)\n")


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


def run(kb: KB, text: str) -> Diagnosis:
    return diagnose(Evidence(text=text), kb)


def test_an_oom_with_most_of_the_gpu_free_is_set_aside_with_the_figures(kb: KB) -> None:
    d = run(kb, SLEEP_MODE_OOM)
    assert d.problems == []
    assert len(d.notes) == 1 and "66.43 GiB of 79.11 GiB was free" in d.notes[0]


def test_an_oom_on_a_full_gpu_stays_an_oom(kb: KB) -> None:
    d = run(kb, FULL_GPU_OOM)
    assert d.problems and d.problems[0].id.startswith("oom-") and not d.notes


@pytest.mark.parametrize(("text", "problem", "says"), [
    (CUT_V0_CHECK, "max-model-len-exceeds-kv-cache", "29,472 tokens"),
    (BF16_ON_V100, "unsupported-hardware-or-dtype", "compute capability 7.0"),
], ids=["kv-tokens-below-max-model-len", "bf16-on-v100"])
def test_the_figures_name_a_check_whose_error_line_was_cut(kb: KB, text: str, problem: str,
                                                           says: str) -> None:
    d = run(kb, text)
    assert [p.id for p in d.problems] == [problem]
    assert says in d.problems[0].evidence[0]
    assert d.problems[0].confidence < 0.9  # the figures, not the message: said as weaker


@pytest.mark.parametrize("text", [CUT_V0_CHECK, BF16_ON_V100], ids=["kv", "bf16"])
def test_a_line_that_names_a_failure_decides_instead(kb: KB, text: str) -> None:
    assert [p.id for p in run(kb, text + NCCL_LINE).problems] == ["nccl-failure"]


# verl#1141: a bare OOM in a PPO run whose trainer drives the vLLM rollout on the same GPUs
VERL_OOM = ("python3 -m verl.trainer.main_ppo "
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.4\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 98.00 MiB. GPU 0 has a "
            "total capacity of 21.99 GiB of which 33.44 MiB is free.\n")


def test_an_unplaced_oom_in_a_trainers_run_happened_while_it_trained(kb: KB) -> None:
    d = run(kb, VERL_OOM)
    assert d.problems[0].id == "oom-under-load"
    assert d.causes[0].id == "foreign-process-holds-memory"


def test_requests_pending_with_the_kv_cache_nearly_empty_are_not_preemption(kb: KB) -> None:
    """vllm#11517: 'requests stuck in pending' is the words for preemption, but a KV cache at
    3% is not the pool running out."""
    text = ("requests are getting stuck in the pending state despite having available GPU "
            "resources\nINFO 12-20 10:00:01 metrics.py:349] Avg prompt throughput: 0.0 tokens/s,"
            " Avg generation throughput: 30.1 tokens/s, Running: 1 reqs, Swapped: 0 reqs, "
            "Pending: 3 reqs, GPU KV cache usage: 3.1%, CPU KV cache usage: 0.0%.\n")
    assert "kv-cache-preemption" not in [p.id for p in run(kb, text).problems]
    full = text.replace("GPU KV cache usage: 3.1%", "GPU KV cache usage: 99.6%")
    assert run(kb, full).problems[0].id == "kv-cache-preemption"


def test_the_same_oom_alone_is_read_as_start_up(kb: KB) -> None:
    assert run(kb, VERL_OOM.split("\n", 1)[1]).problems[0].id == "oom-during-startup-profiling"


# vllm#5714: the author's words name both a load failure and the OOM; 70B bf16 on one 80 GB GPU
BOTH_NAMED = ("We should strive to be more helpful in telling the user why vLLM went out of "
              "memory. We can start with the easy case of failing to initialize or load the "
              "model.\n"
              "Here is the new message when trying to load Llama 3 70B on a single 80GB GPU:\n"
              "python -c 'from vllm import LLM;LLM(\"meta-llama/Meta-Llama-3-70B-Instruct\")'\n")


def test_weights_that_cannot_fit_decide_between_two_readings_the_words_name(kb: KB) -> None:
    d = run(kb, BOTH_NAMED)
    assert [p.id for p in d.problems][:1] == ["oom-loading-weights"]
    assert len({p.id for p in d.problems}) == len(d.problems)  # moved up, not named twice
    assert any("placed by the facts" in e for e in d.problems[0].evidence)
