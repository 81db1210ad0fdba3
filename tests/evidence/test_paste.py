"""Pastes as they arrive: wrapped at a width, prefixed on every fragment, quoted, re-flowed.

Each test's text is a real paste or a real line wrapped the way terminals, Ray and CI viewers
wrap it; the assertion is what a reader would see: one message, its numbers intact.
"""

from __future__ import annotations

import time

import pytest

from bot.evidence import extract_facts
from bot.evidence.paste import is_prose, split_prefix, unwrap

V1_KV = ("ValueError: To serve at least one request with the model's max seq len (262144), "
         "(36.0 GiB KV cache is needed, which is larger than the available KV cache memory "
         "(6.94 GiB). Based on the available memory, the estimated maximum model length is "
         "50512. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
         "initializing the engine.")
PREFIX = "(EngineCore_DP0 pid=494) ERROR 05-20 00:55:14 [core.py:700] "


def cut(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)]


def kv_facts(text: str) -> tuple[object, ...]:
    f = extract_facts(unwrap(text).text)
    return (f.max_model_len, f.kv_cache_needed_gib, f.kv_cache_available_gib,
            f.estimated_max_model_len)


EXPECTED = (262144, 36.0, 6.94, 50512)


def test_a_terminal_cut_mid_word_and_mid_number_is_one_line_again() -> None:
    for width in (60, 77, 100, 133, 200):
        text = "\n".join(cut(PREFIX + V1_KV, width))
        assert kv_facts(text) == EXPECTED, width


def test_the_same_prefix_on_every_fragment_is_read_once() -> None:
    for width in (60, 90, 120):
        text = "\n".join(PREFIX + frag for frag in cut(V1_KV, width))
        out = unwrap(text)
        assert out.text.count("(EngineCore_DP0 pid=494)") == 1
        assert kv_facts(text) == EXPECTED


def test_quotes_ci_pipes_and_timestamps_are_dropped() -> None:
    text = "\n".join(f"> [2026-08-30T12:56:32Z]   | {frag}" for frag in cut(V1_KV, 70))
    assert kv_facts(text) == EXPECTED
    assert not unwrap(text).text.startswith((">", "["))


def test_a_re_flowed_message_is_joined_at_spaces() -> None:
    text = ("ValueError: To serve at least one request with the model's max seq len (262144),\n"
            "(36.0 GiB KV cache is needed, which is larger than the available KV cache\n"
            "memory (6.94 GiB). Based on the available memory, the estimated maximum\n"
            "model length is 50512. Try increasing `gpu_memory_utilization` or\n"
            "decreasing `max_model_len` when initializing the engine.")
    assert kv_facts(text) == EXPECTED


def test_ray_output_wrapped_by_a_terminal() -> None:
    # OpenRLHF#265, as pasted: Ray's worker-death message cut at 149 columns, mid-word
    text = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system"
        " error. To troubleshoot the problem, check the logs for the dead w\n"
        "orker. RayTask ID: ffffffffffffffffb45df1d7796fb62aba30b3e503000000 Worker ID: 5ed9f46a"
        "d3df8e98e49005e308d12449f3e91214437c0150a757182b Node ID: 7578\n"
        "6dfcc8e7bdbd44ce67d47fede848ca91dfcd5586c299cce8962d Worker IP address: 10.0.1.75 Work"
        "er port: 10230 Worker PID: 207258 Worker exit type: SYSTEM_ERRO\n"
        "R Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of"
        " file. There are some potential root causes. (1) The process is\n"
        " killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is cal"
        "led. (3) The worker is crashed unexpectedly due to SIGSEGV or o\n"
        "ther unexpected errors. [repeated 2x across cluster]\n")
    lines = unwrap(text).text.splitlines()
    assert len(lines) == 1
    assert "Worker exit type: SYSTEM_ERROR Worker exit detail" in lines[0]
    assert "The process is killed by SIGKILL by OOM killer" in lines[0]
    assert "SIGSEGV or other unexpected errors." in lines[0]


def test_a_logger_padding_fragments_to_a_column_is_read_as_one_message() -> None:
    # Python's rich logging handler (infinity#483): each fragment padded to the column, the
    # next indented under the message; the two processes and the server's size are read
    paste = ("ERROR    2024-11-28 13:24:44,248 infinity_emb ERROR: CUDA   batch_handler.py:574\n"
             "         out of memory. Tried to allocate 3.88 GiB. GPU 0                       \n"
             "         has a total capacity of 44.42 GiB of which 920.81                      \n"
             "         MiB is free. Process 247326 has 5.95 GiB memory in                     \n"
             "         use. Process 248104 has 37.55 GiB memory in use.                       \n"
             "         Of the allocated memory 5.44 GiB is allocated by                       \n"
             "         PyTorch, and 6.72 MiB is reserved by PyTorch but                       \n"
             "         unallocated.                                                           \n")
    assert "GPU 0 has a total capacity of 44.42 GiB of which 920.81 MiB is free." in \
        unwrap(paste).text
    facts = extract_facts(unwrap(paste).text)
    assert facts.gpu_total_gib == 44.42
    assert [(p.pid, p.used_mib) for p in facts.processes] == [(247326, 5.95 * 1024),
                                                              (248104, 37.55 * 1024)]


def test_records_stay_apart() -> None:
    text = ("INFO 11-20 10:45:57 model_runner.py:692] Loading model weights took 1.9900 GB\n"
            "INFO 11-20 10:45:57 gpu_executor.py:102] # GPU blocks: 12453, # CPU blocks: 2730\n"
            "Killed\n"
            "(VllmWorker rank=0 pid=10) ERROR 05-04 12:38:38 [multiproc_executor.py:380] a\n"
            "(VllmWorker rank=1 pid=11) ERROR 05-04 12:38:38 [multiproc_executor.py:380] b\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
            "    self.run()\n")
    assert unwrap(text).text == text


def test_caret_markers_go_and_line_numbers_point_at_the_paste() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "x.py", line 1, in <module>\n'
            "    llm = LLM(model='m')\n"
            "          ^^^^^^^^^^^^^^\n"
            "ValueError: No available memory for the cache blocks.\n")
    out = unwrap(text)
    assert "^^^" not in out.text
    assert out.raw_line(4) == 5  # the error is line 5 of what was pasted


def test_nested_prefixes_are_split_and_kept_on_the_first_line() -> None:
    line = "(APIServer pid=1) (EngineCore_DP0 pid=68) ERROR 02-06 16:34:06 [core.py:936] boom"
    transport, prefix, body = split_prefix("vllm-1  | " + line)
    assert (transport, body) == ("vllm-1  | ", "boom")
    assert prefix == line[:-len("boom")]


@pytest.mark.slow
def test_pathological_input_stays_linear() -> None:
    shapes = ["x\n" * 500_000, ("a" * 99 + "\n") * 10_000, "a" * 1_000_000,
              ("(Worker pid=1) " + "b " * 60 + "\n") * 5_000]
    for text in shapes:
        started = time.perf_counter()
        out = unwrap(text)
        took = time.perf_counter() - started
        longest_in = max(len(line) for line in text.splitlines())
        # joining never builds a line past the scanner's window (a long line stays as long)
        assert max(len(line) for line in out.text.splitlines()) <= max(16 * 1024, longest_in)
        assert took < 10, (len(text), took)  # generous: a guard against quadratic work


def test_a_compose_service_named_plainly_is_transport() -> None:
    # vllm#13100: compose without a replica number ("vllm  | "), two records of one logger
    text = ("vllm  | ERROR 02-11 08:25:49 serving_chat.py:661] torch.OutOfMemoryError: CUDA out "
            "of memory. Tried to allocate 1.15 GiB. GPU 0 has a total capacity of 79.15 GiB of "
            "which 1.13 GiB is free. Process 64697 has 78.00 GiB memory in use.\n"
            "vllm  | ERROR 02-11 08:25:49 serving_chat.py:661] Error in chat completion stream "
            "generator.\n")
    lines = unwrap(text).text.splitlines()
    assert len(lines) == 2
    assert lines[1] == ("ERROR 02-11 08:25:49 serving_chat.py:661] Error in chat completion "
                        "stream generator.")


def test_colour_codes_copied_without_their_escape_are_dropped() -> None:
    # vllm#2826 as GitHub shows it: the ESC of Ray's colour codes is lost, "[36m" stays
    line = (" [36m(RayWorkerVllm pid=5085) [0m [E ProcessGroupNCCL.cpp:475] [Rank 4] Watchdog "
            "caught collective operation timeout")
    out = unwrap(line).text.rstrip("\n")
    assert out.startswith("(RayWorkerVllm pid=5085) [E ProcessGroupNCCL.cpp:475]")
    assert split_prefix(out)[1] == "(RayWorkerVllm pid=5085) "


def test_a_drawn_table_is_not_a_wrap_width() -> None:
    # vllm#19125: nvidia-smi rows are one width by design; none continues another
    table = ("| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: "
             "12.4     |\n"
             "|   0  NVIDIA GeForce RTX 4060 Ti     Off |   00000000:01:00.0 Off |              "
             "    N/A |\n"
             "|  0%   33C    P8              9W /  160W |    3578MiB /   8188MiB |      0%     "
             " Default |\n")
    text = table + "RuntimeError: Engine core initialization failed. See root cause above.\n"
    assert unwrap(text).text == text
    gpu = extract_facts(unwrap(text).text).gpus[0]
    assert (gpu.name, gpu.used_mib, gpu.total_mib) == ("NVIDIA GeForce RTX 4060 Ti", 3578, 8188)


def test_a_width_met_by_the_message_or_by_the_whole_line() -> None:
    # A logger prefixed the fragments of one message after the cut; another message, pasted
    # without a prefix, was cut at the same width: both are rejoined.
    prefixed = "\n".join(PREFIX + frag for frag in cut(V1_KV, 80))
    plain = "\n".join(cut("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 "
                          "MiB. GPU 0 has a total capacity of 23.56 GiB of which 56.88 MiB is "
                          "free", 80))
    out = unwrap(prefixed + "\n" + plain).text.splitlines()
    assert len(out) == 2
    assert "total capacity of 23.56 GiB of which 56.88 MiB is free" in out[1]
    assert kv_facts(prefixed + "\n" + plain) == EXPECTED


@pytest.mark.parametrize(("line", "prose"), [
    ("The server starts fine, then crashes with an OOM after a few minutes", True),
    ("我在尝试vllm推理时，50g显存为什么都会报错out of memory", True),
    ("I get this ValueError: To serve at least one request", True),
    ("ERROR 11-30 10:00:01 [core.py:700] ValueError: No available memory", False),
    ('  File "/usr/lib/python3/vllm/worker.py", line 71, in init_model', False),
    # the remains of a logger's prefix before an exception are code, not words
    ("start.py:1395 (EngineCore pid=1713) ValueError: To serve at least one request with the "
     "model's max seq len (131072)", False),
    ("`Free memory on device (10.2/79.2 GiB) on startup is less than desired`", False),
    # a pasted command line with its options is the evidence, however many words it holds
    ("CUDA_VISIBLE_DEVICES=0,1 lmdeploy serve api_server /models/InternVL2-40B --server-port "
     "23333 --tp 2 --cache-max-entry-count 0.5 --model-name internvl2", False),
    ("$ vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 --gpu-memory-utilization 0.9",
     False),
    ("I ran vllm serve with the same model and it worked before the upgrade", True),
    # two words are a sentence when a subject leads them (vllm#9163), not a log record's
    ("it OOMs:", True),
    ("Worker exiting", False),
])
def test_a_persons_words_are_told_from_a_programs(line: str, prose: bool) -> None:
    assert is_prose(line) is prose


def test_screenshots_of_one_length_are_no_wrap_width() -> None:
    # GLM-4#47: uploaded images share a URL length; the lines after them stay lines
    text = ("![image](https://github.com/THUDM/GLM-4/assets/19431702/869a8f91-3ac2-4474-9cb2-"
            "7859e68217d0)\n- 当 max_model_len  > 20768报错如下\n"
            "![image](https://github.com/THUDM/GLM-4/assets/19431702/431e4226-31ba-47cb-bc3e-"
            "04a4b1acb2f8)\n### 当 max_model_len <= 16384 (16k，精确数值未测) ，成功启动\n")
    lines = unwrap(text).text.splitlines()
    assert lines[-1] == "### 当 max_model_len <= 16384 (16k，精确数值未测) ，成功启动"
    assert len(lines) == 4


def test_a_word_cut_into_what_reads_as_a_setting_is_rejoined() -> None:
    # GLM-4.5#94 cut at 120 columns under a logger's prefix: "tile_n_siz|e = 64" alone
    # would read as a key = value line
    line = ("(EngineCore_DP0 pid=65064) ERROR 11-30 10:00:01 [core.py:700] RuntimeError: size_n "
            "= 2736 is not divisible by tile_n_size = 64")
    pasted = line[:120] + "\n" + line[120:]
    assert unwrap(pasted, frozenset({"size"})).text == line + "\n"


def test_llama_cpp_timestamped_records_stay_apart() -> None:
    # llama-box (llama.cpp) prints each record as `minutes.seconds.ms.us LEVEL message`
    # (gpustack#1269): each line is its own record, not one message wrapped over three.
    text = ("3.02.081.137 I llama_kv_cache_init:      CUDA2 KV buffer size =  3840.00 MiB\n"
            "3.02.199.202 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4480.00 MiB "
            "on device 3: cudaMalloc failed: out of memory\n"
            "3.02.199.205 E llama_kv_cache_init: failed to allocate buffer for kv cache\n")
    lines = unwrap(text).text.splitlines()
    assert len(lines) == 3
    assert lines[2].endswith("failed to allocate buffer for kv cache")
    assert split_prefix(lines[1])[1] == "3.02.199.202 E "


def test_llama_cpp_function_named_records_stay_apart() -> None:
    # llama.cpp names each record by the function that logs it (llama.cpp#16748); a record
    # that ends without a full stop ("... n_outputs = 1") is not continued by the next one.
    text = ("llama_context:  CUDA_Host  output buffer size =     0.50 MiB\n"
            "llama_kv_cache:      CUDA0 KV buffer size = 12327.00 MiB\n"
            "llama_kv_cache:      CUDA1 KV buffer size = 11153.00 MiB\n"
            "llama_kv_cache: size = 23480.00 MiB (150272 cells,  40 layers,  1/1 seqs), "
            "K (f16): 11740.00 MiB, V (f16): 11740.00 MiB\n"
            "llama_context: enumerating backends\n"
            "llama_context: backend_ptrs.size() = 3\n"
            "llama_context: max_nodes = 2904\n"
            "llama_context: pipeline parallelism enabled (n_copies=4)\n"
            "llama_context: reserving full memory module\n"
            "llama_context: worst-case: n_tokens = 4096, n_seqs = 1, n_outputs = 1\n"
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 12710.31 MiB on device 0: "
            "cudaMalloc failed: out of memory\n"
            "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 13327728640\n"
            "graph_reserve: failed to allocate compute buffers\n")
    out = unwrap(text).text.splitlines()
    assert len(out) == len(text.splitlines())
    assert out[-1] == "graph_reserve: failed to allocate compute buffers"
