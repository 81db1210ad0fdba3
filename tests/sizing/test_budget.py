"""The budget from the log, from the host and from the catalogs, and the what-ifs."""

from __future__ import annotations

import pytest

from bot.schema import Facts, GpuInfo, GpuProcess
from bot.sizing.budget import compute_sizing, look_up_model, params_from_name


def test_log_estimate_is_used_and_checked_for_agreement() -> None:
    """vllm-34076: the printed estimate is the answer, whatever our geometry says."""
    facts = Facts(engine="vllm", model="./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
                  max_model_len=262_144, kv_cache_needed_gib=24.0, kv_cache_available_gib=3.18,
                  estimated_max_model_len=34_736, gpu_memory_utilization=0.9)
    s = compute_sizing(facts)
    assert s.basis == "log" and not s.is_estimate
    assert s.max_model_len_that_fits == 34_736
    assert s.kv_bytes_per_token == 98_304
    assert not any("outside our range" in n for n in s.notes)  # PP=1: our formula agrees
    pp2 = compute_sizing(Facts(**{**facts.known(), "pipeline_parallel_size": 2}))
    assert pp2.max_model_len_that_fits == 34_736
    assert any("outside our range" in n for n in pp2.notes)
    # the other figures follow vLLM's estimate, not our (disagreeing) PP geometry
    for s_ in (s, pp2):
        assert s_.extra.num_gpu_blocks == 34_736 // 16
        assert s_.max_concurrency == round(2171 / 16_384, 2)


def test_v1_log_numbers_qwen3_14b() -> None:
    s = compute_sizing(Facts(engine="vllm", model="Qwen/Qwen3-14B", kv_cache_available_gib=6.51,
                             kv_cache_tokens=42_656, max_model_len=32_768,
                             gpu_memory_utilization=0.9, gpu_total_gib=79.19))
    assert s.basis == "log" and not s.is_estimate
    assert s.extra.kv_cache_tokens == 42_656 and s.extra.num_gpu_blocks == 2666
    assert s.max_model_len_that_fits == 40_960  # the pool holds 42,656; the model stops at 40,960
    assert s.max_concurrency == 1.30
    assert s.kv_cache_needed_gib == 5.0  # 2048 blocks x 2.5 MiB


def test_v0_profile_summary_budget() -> None:
    """V0 0.7-0.10 three-line summary: 19.85 - 2.88 - 0.05 - 1.40 = 15.52."""
    s = compute_sizing(Facts(engine="vllm", engine_generation="V0", model="Qwen/Qwen2.5-Math-1.5B",
                             gpu_total_gib=22.06, gpu_memory_utilization=0.9, budget_gib=19.85,
                             weights_gib=2.88, non_torch_gib=0.05, activation_peak_gib=1.40,
                             max_model_len=4096))
    assert s.basis == "log" and not s.is_estimate
    assert s.kv_cache_available_gib == 15.52
    assert s.extra.num_gpu_blocks is not None and abs(s.extra.num_gpu_blocks - 36_326) <= 1
    assert s.extra.non_kv_gib == 4.33


def test_v0_max_seq_len_error_tokens() -> None:
    """V0: 'max seq len (29000) larger than ... KV cache (23648)' -> fits 23,648."""
    s = compute_sizing(Facts(engine="vllm", engine_generation="V0",
                             model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=29_000,
                             kv_cache_tokens=23_648))
    assert s.max_model_len_that_fits == 23_648
    assert s.extra.num_gpu_blocks == 1478
    assert s.max_concurrency == 0.82


def test_an_estimate_the_log_contradicts_is_left_out() -> None:
    """Qwen3-16-c: a sentence names qwen-72b (135 GiB at TP 1, more than the A100), but the
    log's KV cache holds 4464 tokens: the weights fit, so the estimate is not this model's."""
    facts = Facts(engine="vllm", engine_generation="V0", model="qwen-72b", gpu_name="A100",
                  gpu_count=2, max_model_len=32_768, kv_cache_tokens=4464)
    s = compute_sizing(facts)
    assert s.weights_gib is None and s.kv_cache_available_gib is None
    assert any("not this model's" in n for n in s.notes)
    assert s.max_model_len_that_fits == 4464
    # with no log figure for the KV cache, the same estimate stands
    unsized = compute_sizing(Facts(**{**facts.known(), "kv_cache_tokens": None}))
    assert unsized.weights_gib is not None and unsized.weights_gib > 80


def test_without_model_geometry_the_log_still_gives_the_fit() -> None:
    s = compute_sizing(Facts(engine="vllm", model="my-private-finetune", max_model_len=131_072,
                             kv_cache_needed_gib=16.0, kv_cache_available_gib=9.97))
    assert s.kv_bytes_per_token == 131_072 and s.is_estimate
    assert s.max_model_len_that_fits == int(9.97 * 2**30 // (131_072 * 16)) * 16 == 81_664
    assert any("model geometry unknown" in n for n in s.notes)


def test_host_budget_and_free_memory_check() -> None:
    """#20305: free 31.44 of 47.38 GiB < 0.95 x 47.38 = 45.01 -> the v0.9.1+ check fails."""
    facts = Facts(engine="vllm", model="Qwen/Qwen3-8B", gpu_total_gib=47.38,
                  free_memory_gib=31.44, gpu_memory_utilization=0.95,
                  processes=[GpuProcess(pid=7, name="python", used_mib=16_000,
                                        is_server=False)])
    s = compute_sizing(facts)
    assert s.extra.free_check_fails is True
    assert s.budget_gib == 45.011
    assert s.extra.foreign_processes_gib == 15.625
    assert s.basis == "host" and s.is_estimate  # weights/activation from the catalog
    assert s.extra.utilization_needed is not None


def test_catalog_estimate_from_nvidia_smi_table() -> None:
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072,
                  gpus=[GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", total_mib=24_564,
                                free_mib=24_000)])
    s = compute_sizing(facts)
    assert s.basis == "host" and s.is_estimate
    assert s.weights_gib is not None and 14.9 < s.weights_gib < 15.0  # 8.03B x 2 B
    assert s.max_model_len_that_fits is not None and s.max_model_len_that_fits % 16 == 0
    assert s.max_model_len_that_fits < 131_072
    fp8 = s.extra.fp8_max_model_len
    assert fp8 is not None and fp8 >= 2 * s.max_model_len_that_fits - 16
    assert any("gpu_memory_utilization not shown" in n for n in s.notes)


def test_catalog_only_from_the_gpu_name() -> None:
    s = compute_sizing(Facts(engine="vllm", model="Llama 3 70B", gpu_name="NVIDIA A100-SXM4-80GB",
                             max_model_len=8192))
    assert s.basis == "catalog" and s.is_estimate
    assert s.extra.weights_exceed_gpu is True
    assert s.extra.suggested_tensor_parallel_size == 2
    assert s.extra.tp_max_model_len == 8192


def test_kv_cache_memory_flag_sets_the_pool() -> None:
    s = compute_sizing(Facts(engine="vllm", model="Qwen/Qwen3-14B", weights_gib=27.5,
                             kv_cache_memory_bytes=8 * 2**30, max_model_len=40_960))
    assert s.kv_cache_available_gib == 8.0
    assert s.max_model_len_that_fits == 40_960  # 51,200 capped at the model's maximum


def test_what_ifs_quantization_offload_and_batched_tokens() -> None:
    s = compute_sizing(Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct",
                             gpu_total_gib=22.05, gpu_memory_utilization=0.9, budget_gib=19.85,
                             weights_gib=14.99, activation_peak_gib=2.5, non_torch_gib=0.1,
                             max_num_batched_tokens=8192, max_model_len=32_768))
    assert s.kv_cache_available_gib == 2.26
    x = s.extra
    assert x.quantized_weights_gib == round(14.99 * 0.5625 / 2, 3)
    assert x.quantized_max_model_len is not None and s.max_model_len_that_fits is not None
    assert x.quantized_max_model_len > s.max_model_len_that_fits
    assert x.suggested_max_num_batched_tokens == 4096
    assert x.activation_saving_gib == 1.0
    assert x.cpu_offload_gb_suggested == 2  # 4.00 needed - 2.26 available, +10 %
    # the most the GPU can give at 0.95 next to the non-KV 17.59 GiB, less vLLM's 150 MiB margin
    room = 22.05 * 0.95 - (19.85 - 2.26) - 150 / 1024
    assert x.kv_cache_memory_suggested_bytes == int(room * 2**30) // 2**20 * 2**20
    assert x.suggested_max_num_seqs == 128  # unknown: below every vLLM default


def test_nothing_known_does_not_crash() -> None:
    s = compute_sizing(Facts())
    assert s.max_model_len_that_fits is None and s.kv_bytes_per_token is None


def test_weights_that_fill_the_gpu_suggest_the_tp_that_leaves_room_without_a_budget() -> None:
    """sglang-7006: Qwen3-32B-FP8 at --tp-size 2 on 16 GB cards, no utilization or KV line:
    15.6 GiB of weights per GPU of 15.77; TP 4 leaves each GPU half its memory."""
    facts = Facts(engine="sglang", model="Qwen/Qwen3-32B-FP8", tensor_parallel_size=2,
                  gpu_total_gib=15.77)
    s = compute_sizing(facts)
    assert s.extra.suggested_tensor_parallel_size == 4
    roomy = compute_sizing(Facts(**{**facts.known(), "gpu_total_gib": 79.1}))
    assert roomy.extra.suggested_tensor_parallel_size is None  # the weights fit at TP 2


def test_a_local_path_that_names_no_model_is_sized_as_the_model_the_person_names() -> None:
    facts = Facts(engine="sglang", model="mymodels", model_named="Qwen3-32B-FP8")
    found = look_up_model(facts).model
    assert found is not None and found.spec.id == "Qwen/Qwen3-32B"
    assert found.quantization == "fp8"
    # a model the catalog knows is read as given, whatever the prose names
    given = look_up_model(Facts(model="meta-llama/Llama-3.1-8B", model_named="Qwen3-32B")).model
    assert given is not None and given.spec.id == "meta-llama/Llama-3.1-8B-Instruct"
    unknown = look_up_model(Facts(model="mymodels"))
    assert unknown.model is None and unknown.unknown is not None


@pytest.mark.parametrize(("name", "params"), [
    ("Qwen2-7B-Instruct", 7e9), ("llama-2-13b-chat", 13e9), ("Mixtral-8x7B", 56e9),
    ("opt-125m", 125e6), ("Qwen3-30B-A3B", 30e9),  # an MoE's total, not its active size
    # the size right after a lower-case name, as vllm#928's './baichuan13b_new'
    ("./baichuan13b_new", 13e9), ("chatglm6b", 6e9),
    # no size: a version, a dotted number
    ("openchat/openchat_3.5", None), ("gpt2", None), ("model-v1.5b", None),
])
def test_the_parameter_count_a_model_s_name_states(name: str, params: float | None) -> None:
    assert params_from_name(name) == params
