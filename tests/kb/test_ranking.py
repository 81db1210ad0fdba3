"""How the shipped KB weighs lines against each other on real pastes: the error that ended the
process decides, a logger's own level caps what a line can claim, and a performance finding
is beside the point once the paste shows the server failing."""

from __future__ import annotations

import pytest

from bot.authoring.examples import match_problems
from bot.diagnose import diagnose
from bot.kb.loader import KB, load_kb
from bot.kb.match import CompiledKB
from bot.schema import Evidence

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



def test_a_profile_run_traceback_ending_in_a_triton_kernel_fault_is_not_a_memory_problem(
        ) -> None:
    """vllm#5692 (a comment's log, its lines run together): the profile run raised Triton's
    'Error [CUDA]: an illegal memory access'. A traceback through the profile run that shows
    its error is that error, not an OOM whose message was cut."""
    text = ('test2:58772:59441 [1] NCCL INFO comm 0x183404d0 rank 1 nranks 2 cudaDev 1 nvmlDev 3 '
            'busId b0 commId 0xe478ef85b5692b1b - Init COMPLETE test2:56697:59440 [0] NCCL INFO c'
            'omm 0x187b96f0 rank 0 nranks 2 cudaDev 0 nvmlDev 2 busId a0 commId 0xe478ef85b5692b1'
            'b - Init COMPLETE (VllmWorkerProcess pid=58772) ERROR 06-20 13:41:48 multiproc_worke'
            'r_utils.py:226] Exception in worker VllmWorkerProcess while processing method determ'
            'ine_num_available_blocks: Triton Error [CUDA]: an illegal memory access was encounte'
            'red, Traceback (most recent call last): (VllmWorkerProcess pid=58772) ERROR 06-20 13'
            ':41:48 multiproc_worker_utils.py:226] File "/root/miniconda3/envs/llm_server3/lib/py'
            'thon3.10/site-packages/vllm/executor/multiproc_worker_utils.py", line 223, in _run_w'
            'orker_process')
    d = diagnose(Evidence(text=text), load_kb())
    assert not {p.id for p in d.problems} & {
        "oom-during-startup-profiling", "oom-loading-weights", "oom-under-load"}
    assert "cuda-kernel-fault" in [c.id for c in d.causes]


# verl#488: vLLM's block count, its traceback cut; the last frame read is the collective
CUT_IN_PROFILING = (
    'File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 421, in '
    "_initialize_kv_caches\n"
    "self.model_executor.determine_num_available_blocks())\n"
    'File "/usr/local/lib/python3.10/dist-packages/vllm/executor/uniproc_executor.py", line 137, '
    "in determine_num_available_blocks\n")
CUT_IN_COLLECTIVE = CUT_IN_PROFILING + (
    "dist.all_reduce(a_tensor, group=cpu_group, op=dist.ReduceOp.MIN)\n"
    'File "/usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py", line 83, in '
    "wrapper\n")
MEMORY = {"oom-during-startup-profiling", "kv-cache-no-blocks", "oom-loading-weights",
          "max-model-len-exceeds-kv-cache"}


def test_a_cut_traceback_is_read_at_its_innermost_frame() -> None:
    """Cut inside the profile run: a start-up memory failure. Cut inside a collective the
    profile run called: the ranks were waiting on each other, and the outer frames' memory
    readings are set aside."""
    kb = load_kb()
    profiling = [p.id for p in diagnose(Evidence(text=CUT_IN_PROFILING), kb).problems]
    assert profiling and profiling[0] in MEMORY
    collective = [p.id for p in diagnose(Evidence(text=CUT_IN_COLLECTIVE), kb).problems]
    assert collective == ["nccl-failure"]


def test_a_cut_traceback_does_not_outweigh_the_error_the_user_names() -> None:
    """vllm#16761: the user names the error ("the engine fails to initialize due to a NCCL
    error: invalid usage") above a traceback cut inside the KV-cache set-up: the frames'
    memory reading is set aside, as when the innermost frame is not about memory."""
    said = ("When attempting to serve Qwen2.5-vl or Intern-vl model using vLLM with tensor "
            "parallelism (--tensor-parallel-size 4), the engine fails to initialize due to a "
            "NCCL error: invalid usage.\n\n")
    kb = load_kb()
    alone = [p.id for p in diagnose(Evidence(text=CUT_IN_PROFILING), kb).problems]
    assert alone and alone[0] in MEMORY
    named = [p.id for p in diagnose(Evidence(text=said + CUT_IN_PROFILING), kb).problems]
    assert named == ["nccl-failure"]


def test_words_about_speed_do_not_hide_an_oom_said_in_the_same_sentence(
        compiled: CompiledKB) -> None:
    """ms-swift#4594: 'GPU memory blows up with vLLM; without vLLM training works, but slowly'.
    The OOM is the problem; the slowness is the alternative's."""
    text = "8*A100执行GRPO完整流程，使用vllm爆显存，不使用vllm可以正常训练但缓慢\n"
    found = match_problems(compiled, text)
    assert found and found[0] in ("oom-under-load", "oom-during-startup-profiling")



# xinference#516: the model started using ~13G; after the service was called (调用服务后) the
# GPU memory overflowed (显存溢出)
STARTED_THEN_CALLED = ("启动 baichuan-2-chat-7b 模型时，占用GPU内存大概13G，"
                       "但是调用服务后，就显存溢出了，如下图：\n")
# sglang#15871: start-up named in passing, "eventually" next to the OOM
STARTUP_IN_PASSING = (
    "While other GPUs (Rank 1-7) maintain stable memory usage, GPU 0 consumes significantly "
    "more memory. Over time or during startup/compilation, an \"extra\" process (or unreleased "
    "memory handle) appears on GPU 0, occupying ~20GB of VRAM, eventually causing an OOM error "
    "even when mem-fraction-static is lowered.\n")


@pytest.mark.parametrize("said", [STARTED_THEN_CALLED, STARTUP_IN_PASSING])
def test_of_two_phases_in_one_sentence_the_words_nearest_the_oom_place_it(
        compiled: CompiledKB, said: str) -> None:
    found = match_problems(compiled, said)
    assert found[:1] == ["oom-under-load"]
    assert "oom-during-startup-profiling" in found  # still named, below
