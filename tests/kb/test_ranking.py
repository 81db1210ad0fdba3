"""How the shipped KB weighs lines against each other on real pastes: the error that ended the
process decides, a logger's own level caps what a line can claim, and a performance finding
is beside the point once the paste shows the server failing."""

from __future__ import annotations

import pytest

from bot.authoring.examples import match_problems
from bot.kb.loader import KB, load_kb
from bot.kb.match import CompiledKB

# vllm#7514: the port was taken; the restart's libcuda import warning is noise
PORT_THEN_IMPORT_WARNING = (
    '  File "/home/users/zoobab/mnt/vllm/entrypoints/openai/api_server.py", line 530, in '
    "run_server\n"
    '    temp_socket.bind(("", args.port))\n'
    "OSError: [Errno 98] Address already in use\n"
    "Starting vLLM...\n"
    "WARNING 10-10 10:22:58 _custom_ops.py:18] Failed to import from vllm._C with "
    "ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')\n")
# vllm#31387: the FP8 weight-only fallback warning, then the workers fail to start
FP8_FALLBACK_THEN_FAILURE = (
    "**Your GPU does not have native support for FP8 computation but FP8 quantization is being "
    "used. Weight-only FP8 compression will be used leveraging the Marlin kernel.** This may "
    "degrade performance for compute-heavy workloads.\n"
    " WorkerProc failed to start.\n"
    " Traceback (most recent call last):\n")
FP8_FALLBACK_ALONE = FP8_FALLBACK_THEN_FAILURE.split("\n")[0] + "\n"


@pytest.fixture(scope="module")
def compiled() -> CompiledKB:
    kb: KB = load_kb(use_cache=False)
    return CompiledKB(kb)


def test_an_error_message_logged_at_warning_level_does_not_outrank_the_error(
        compiled: CompiledKB) -> None:
    assert match_problems(compiled, PORT_THEN_IMPORT_WARNING) == []


def test_the_same_message_as_the_error_that_ended_the_process_is_the_problem(
        compiled: CompiledKB) -> None:
    line = ("ImportError: libcuda.so.1: cannot open shared object file: No such file or "
            "directory\n")
    assert match_problems(compiled, line)[:1] == ["nvidia-driver-failure"]


def test_the_fp8_fallback_warning_alone_says_the_gpu_lacks_fp8(compiled: CompiledKB) -> None:
    assert match_problems(compiled, FP8_FALLBACK_ALONE) == ["unsupported-hardware-or-dtype"]


def test_with_a_speed_complaint_it_is_a_throughput_finding(compiled: CompiledKB) -> None:
    said = "Since switching to the FP8 checkpoint the throughput is very low.\n"
    assert match_problems(compiled, said + FP8_FALLBACK_ALONE)[:1] == ["low-throughput"]


def test_a_performance_complaint_before_a_failure_is_beside_the_point(
        compiled: CompiledKB) -> None:
    said = "Since switching to the FP8 checkpoint the throughput is very low.\n"
    assert "low-throughput" not in match_problems(compiled, said + FP8_FALLBACK_THEN_FAILURE)


# vllm#9920, in words: the hang is NCCL's only when the paste shows NCCL at all
HANG = "after I try to run it again, it hangs at llm.generate().\n"
NCCL_DEBUG = "This is what I get for os.environ['NCCL_DEBUG']='TRACE' when it stalls:\n"


def test_a_hang_beside_nccl_lines_is_an_nccl_failure(compiled: CompiledKB) -> None:
    assert match_problems(compiled, HANG + NCCL_DEBUG)[:1] == ["nccl-failure"]
    assert match_problems(compiled, NCCL_DEBUG + HANG)[:1] == ["nccl-failure"]


def test_a_hang_alone_names_no_problem(compiled: CompiledKB) -> None:
    assert match_problems(compiled, HANG) == []
