"""Pastes as they arrive: wrapped at a width, prefixed on every fragment, quoted, re-flowed.

Each test's text is a real paste or a real line wrapped the way terminals, Ray and CI viewers
wrap it; the assertion is what a reader would see: one message, its numbers intact.
"""

from __future__ import annotations

import time

from bot.evidence import extract_facts
from bot.evidence.paste import split_prefix, unwrap

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
