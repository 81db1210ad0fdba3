"""Each condition the KB may name, tested both ways: the facts where it holds (and the proof
it gives, with the numbers) and the nearest facts where it does not. A condition without a row
here fails the last test, so a new one cannot ship untested."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.schema import Facts, GpuProcess
from bot.sizing.budget import compute_sizing
from bot.sizing.checks import CONDITIONS

L8B = "meta-llama/Llama-3.1-8B-Instruct"
L70B = "meta-llama/Llama-3.3-70B-Instruct"
H100 = dict(gpu_name="NVIDIA H100 80GB HBM3", gpu_total_gib=79.19)
A10 = dict(gpu_name="NVIDIA A10", gpu_total_gib=22.49)


def other(pid: int, gib: float) -> GpuProcess:
    return GpuProcess(pid=pid, used_mib=gib * 1024, is_server=False, source="torch")


@dataclass
class Row:
    name: str
    holds: dict[str, Any]
    fails: dict[str, Any]
    says: str = ""  # a piece of the proof when it holds
    sized: bool = field(default=False)  # the condition reads the sizing


ROWS = [
    Row("other_process_memory", dict(processes=[other(4242, 40.0)], foreign_processes_gib=40.0),
        dict(processes=[other(4242, 0.2)], foreign_processes_gib=0.2), "pid 4242"),
    # slime#1951: 3.24 GiB held by another process, a 58.15 GiB request with 47.69 GiB free
    Row("other_process_memory",
        dict(processes=[other(22249, 3.24)], foreign_processes_gib=3.24,
             oom_tried_to_allocate_gib=0.5, oom_free_gib=0.1),
        dict(processes=[other(22249, 3.24)], foreign_processes_gib=3.24,
             oom_tried_to_allocate_gib=58.15, oom_free_gib=47.69), "pid 22249"),
    Row("foreign_process_holds_memory", dict(foreign_processes_gib=12.0),
        dict(foreign_processes_gib=0.1), "12.00 GiB"),
    Row("only_server_on_gpu", dict(processes=[other(7, 0.1)], foreign_processes_gib=0.1),
        dict(processes=[other(7, 9.0)], foreign_processes_gib=9.0), "server's own"),
    Row("memory_outside_pytorch", dict(gpu_total_gib=44.56, oom_outside_pytorch_gib=16.08),
        dict(gpu_total_gib=44.56, oom_outside_pytorch_gib=0.6), "16.08 GiB"),
    # dynamo#1492: torch >= 2.2 names only the failing process (2.46 GiB); others hold the rest
    Row("memory_outside_pytorch",
        dict(gpu_total_gib=79.2, oom_free_gib=0.05, oom_process_in_use_gib=2.46),
        dict(gpu_total_gib=79.2, oom_free_gib=0.05, oom_process_in_use_gib=78.0), "76.69 GiB"),
    Row("memory_in_use_before_start", dict(gpu_total_gib=47.38, used_before_start_gib=15.94),
        dict(gpu_total_gib=47.38, used_before_start_gib=0.5), "15.94 GiB"),
    Row("startup_free_check_failed", dict(free_memory_gib=31.44, gpu_total_gib=47.38,
                                          gpu_memory_utilization=0.95),
        dict(free_memory_gib=46.0, gpu_total_gib=47.38, gpu_memory_utilization=0.95), "31.44"),
    Row("several_engines_on_gpu", dict(engines_on_gpu=2), dict(engines_on_gpu=1), "2 inference"),
    Row("trainer_shares_gpu", dict(trainer_on_gpu=True), dict(), "trainer"),
    Row("training_run", dict(training_run=True), dict(trainer_on_gpu=True), "training run"),
    Row("non_torch_implausible", dict(non_torch_gib=9.5), dict(non_torch_gib=0.6), "9.50 GiB"),
    Row("profile_implausible", dict(model=L8B, activation_peak_gib=16.0, weights_gib=14.99),
        dict(model=L8B, activation_peak_gib=1.4, weights_gib=14.99), "16.00 GiB"),
    Row("weights_exceed_gpu", dict(model=L70B, **H100), dict(model=L8B, **H100),
        "131", sized=True),
    Row("weights_cannot_load", dict(model=L70B, **H100),
        dict(model=L70B, gpu_count=4, **H100), "cannot load", sized=True),
    Row("weights_exceed_one_gpu_unsharded", dict(model=L70B, **H100),
        dict(model=L70B, tensor_parallel_size=4, **H100), "TP", sized=True),
    Row("weights_exceed_budget_at_safe_max", dict(model=L70B, **H100),
        dict(model=L8B, **H100), "0.95", sized=True),
    # no GPU named: a 70B model in bf16 is more than an 80 GB part holds; at TP 2 it is not
    Row("weights_exceed_common_gpu", dict(model=L70B), dict(model=L70B, tensor_parallel_size=2),
        "80 GB", sized=True),
    Row("weights_fill_budget", dict(model=L8B, gpu_memory_utilization=0.7, **A10),
        dict(model=L8B, **A10), "(95%)", sized=True),
    Row("weights_dominate_budget", dict(model=L8B, **A10), dict(model=L8B, **H100), "(74%)",
        sized=True),
    Row("weights_small_in_budget", dict(model=L8B, **H100), dict(model=L8B, **A10), "21%",
        sized=True),
    Row("full_precision_fp32", dict(dtype="float"), dict(dtype="bfloat16"), "4 bytes"),
    Row("spare_gpus", dict(gpu_count=4, tensor_parallel_size=2),
        dict(gpu_count=2, tensor_parallel_size=2), "4 GPUs"),
    Row("no_spare_gpus", dict(gpu_count=2, tensor_parallel_size=2),
        dict(gpu_count=4, tensor_parallel_size=2), "2 GPU"),
    Row("gpu_count_unknown", dict(), dict(gpu_count=2), "nvidia-smi -L"),
    Row("host_has_enough_gpus", dict(model=L70B, gpu_count=8, **H100),
        dict(model=L70B, gpu_count=1, **H100), "8 GPUs", sized=True),
    Row("kv_needed_exceeds_available",
        dict(model=L8B, max_model_len=131072, kv_cache_available_gib=9.97, **H100),
        dict(model=L8B, max_model_len=32768, kv_cache_available_gib=9.97, **H100), "16.00 GiB",
        sized=True),
    Row("max_model_len_fits",
        dict(model=L8B, max_model_len=32768, kv_cache_available_gib=9.97, **H100),
        dict(model=L8B, max_model_len=131072, kv_cache_available_gib=9.97, **H100), "32768",
        sized=True),
    Row("no_kv_memory", dict(kv_cache_available_gib=-1.05), dict(kv_cache_available_gib=3.0),
        "-1.05"),
    Row("nothing_fits", dict(gpu_blocks=0), dict(gpu_blocks=120), "0 blocks"),
    Row("fp8_kv_would_fit",
        dict(model=L8B, max_model_len=131072, kv_cache_available_gib=9.97, **H100),
        dict(model=L8B, max_model_len=131072, kv_cache_available_gib=9.97, kv_cache_dtype="fp8",
             **H100), "fp8", sized=True),
    Row("kv_cache_already_fp8", dict(kv_cache_dtype="fp8_e4m3"), dict(kv_cache_dtype="auto"),
        "fp8_e4m3"),
    Row("kv_pressure", dict(gpu_kv_cache_usage_pct=99.2, preemptions=480),
        dict(gpu_kv_cache_usage_pct=41.0), "480 preemptions"),
    Row("kv_usage_low", dict(gpu_kv_cache_usage_pct=0.3), dict(gpu_kv_cache_usage_pct=82.0),
        "0.3%"),
    Row("utilization_low", dict(gpu_memory_utilization=0.5),
        dict(gpu_memory_utilization=0.92), "0.5"),
    Row("utilization_would_fit",
        dict(model=L8B, max_model_len=32768, gpu_memory_utilization=0.5, **A10),
        dict(model=L8B, max_model_len=4096, gpu_memory_utilization=0.9, **A10), "utilization",
        sized=True),
    Row("trainer_pool_large", dict(trainer_on_gpu=True, gpu_memory_utilization=0.7),
        dict(trainer_on_gpu=True, gpu_memory_utilization=0.4), "70%"),
    Row("utilization_high", dict(gpu_memory_utilization=1.0),
        dict(gpu_memory_utilization=0.9), "1"),
    # lmdeploy's share is of the memory left after the weights
    Row("utilization_high", dict(cache_max_entry_count=0.95),
        dict(cache_max_entry_count=0.5), "95%"),
    Row("server_memory_outside_pytorch",
        dict(oom_process_in_use_gib=30.0, oom_process_outside_pytorch_gib=20.0),
        dict(oom_process_in_use_gib=30.0, oom_process_outside_pytorch_gib=1.5), "20.00 GiB"),
    Row("weights_fill_one_gpu_unsharded", dict(weights_gib=21.0, **A10),
        dict(weights_gib=21.0, tensor_parallel_size=2, **A10), "93%", sized=True),
    Row("utilization_at_safe_max", dict(gpu_memory_utilization=0.95),
        dict(gpu_memory_utilization=0.9), "0.95"),
    Row("utilization_cannot_fit",
        dict(model=L8B, max_model_len=1048576, kv_cache_available_gib=9.97,
             kv_cache_needed_gib=128.0, gpu_memory_utilization=0.9, **H100),
        dict(model=L8B, max_model_len=65536, kv_cache_available_gib=7.0,
             kv_cache_needed_gib=8.0, gpu_memory_utilization=0.9, **H100), "0.95", sized=True),
    Row("activation_peak_large", dict(activation_peak_gib=6.0, budget_gib=71.27),
        dict(activation_peak_gib=1.2, budget_gib=71.27), "6.00 GiB"),
    Row("large_batched_tokens", dict(max_num_batched_tokens=32768),
        dict(max_num_batched_tokens=2048), "32768"),
    Row("chunked_prefill_off_long_context", dict(enable_chunked_prefill=False,
                                                 max_model_len=131072),
        dict(enable_chunked_prefill=True, max_model_len=131072), "131072"),
    Row("multimodal_model", dict(model="Qwen/Qwen2.5-VL-7B-Instruct"), dict(model=L8B),
        "vision"),
    Row("in_cuda_graph_capture", dict(phase="cuda-graph"), dict(phase="profiling"), "CUDA graphs"),
    Row("cuda_graph_large", dict(cuda_graph_gib=2.5), dict(cuda_graph_gib=0.2), "2.50 GiB"),
    Row("lmdeploy_default_pool", dict(engine="lmdeploy"),
        dict(engine="lmdeploy", cache_max_entry_count=0.2), "0.8"),
    Row("cuda_graph_abnormal", dict(cuda_graph_gib=118.65), dict(cuda_graph_gib=2.5),
        "118.65 GiB"),
    Row("already_eager", dict(enforce_eager=True), dict(enforce_eager=False), "enforce-eager"),
    Row("in_sampler_warmup", dict(phase="warmup", max_num_seqs=1024),
        dict(phase="warmup", engine="tgi"), "1024"),
    Row("tgi_warmup_prefill", dict(engine="tgi", phase="warmup", max_batch_prefill_tokens=10000),
        dict(engine="vllm", phase="warmup"), "10000"),
    Row("max_num_seqs_large", dict(max_num_seqs=1024), dict(max_num_seqs=256), "1024"),
    Row("already_quantized", dict(quantization="awq"), dict(), "awq"),
    # ms-swift#9613: a 20 MiB allocation refused with 66 GiB free (vLLM's sleep mode)
    Row("oom_not_a_shortage", dict(oom_tried_to_allocate_gib=0.02, oom_free_gib=66.43,
                                   gpu_total_gib=79.11),
        dict(oom_tried_to_allocate_gib=0.02, oom_free_gib=0.34, gpu_total_gib=79.11),
        "66.43 GiB of 79.11 GiB"),
    # FastChat#3177: 1,842 blocks of 16 = 29,472 tokens under max_seq_len 32,768
    Row("kv_tokens_below_max_model_len", dict(gpu_blocks=1842, max_model_len=32768),
        dict(gpu_blocks=2252, max_model_len=512), "29,472 tokens (1,842 blocks of 16)"),
    # vllm deepseek-v4 on 4x 48 GB: 720 tokens fit where 131072 were asked
    Row("kv_fits_only_a_tiny_context", dict(estimated_max_model_len=720, max_model_len=131072),
        dict(estimated_max_model_len=50512, max_model_len=262144), "only 720 tokens"),
    Row("kv_cache_short", dict(kv_cache_available_gib=0.3, kv_cache_needed_gib=1.34),
        dict(kv_cache_available_gib=6.0, kv_cache_needed_gib=1.34), "even less KV cache"),
    Row("gpu_below_volta", dict(gpu_name="Quadro P4000"), dict(gpu_name="Tesla V100-SXM2-32GB"),
        "compute capability 6.1"),
    Row("bf16_on_pre_ampere", dict(dtype="bfloat16", gpu_name="Tesla V100-PCIE-32GB"),
        dict(dtype="bfloat16", gpu_name="NVIDIA A100-SXM4-80GB"), "compute capability 7.0"),
]


def check(row: Row, values: dict[str, Any]) -> str | None:
    facts = Facts(**values)
    sizing = compute_sizing(facts) if row.sized else None
    return CONDITIONS[row.name](facts, sizing)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_holds_with_its_numbers_and_not_on_the_nearest_facts(row: Row) -> None:
    why = check(row, row.holds)
    assert why is not None and row.says in why, why
    assert check(row, row.fails) is None


def test_every_condition_is_tested_both_ways() -> None:
    assert {r.name for r in ROWS} == set(CONDITIONS)
