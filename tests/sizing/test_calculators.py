"""`inferbot size`: the three calculators agree with the KV arithmetic and with each other."""

from __future__ import annotations

import json

import pytest

from bot.sizing.calculators import SizeError, render_size_text, size
from bot.sizing.catalog import UnknownName
from bot.sizing.kv import GIB


def test_llama_8b_on_h100() -> None:
    r = size("llama-3.1-8b", "NVIDIA H100 80GB HBM3", max_model_len=32_768, concurrency=8)
    m = r.memory
    assert m.kv_bytes_per_token == 131_072 and m.kv_bytes_per_block == 2 * 1024 * 1024
    assert m.kv_per_sequence_gib == 4.0 and m.kv_per_batch_gib == 32.0
    assert m.batch_fits and r.fits
    assert m.sequences_fit is not None and m.kv_cache_tokens is not None
    assert m.sequences_fit == pytest.approx(m.kv_cache_tokens / 32_768, abs=0.01)
    t = r.throughput
    assert t.batch == 8 and t.bound == "memory"
    # roofline by hand: 8.03e9 x 2 B of weights + 8 x 16,384 tokens x 128 KiB of KV per step
    bytes_step = 8.03e9 * 2 + 8 * 16_384 * 131_072
    step = bytes_step / (3350e9 * 0.75)
    assert t.step_ms == pytest.approx(step * 1e3, rel=1e-3)
    assert t.tokens_per_s == pytest.approx(8 / step, rel=1e-3)
    assert t.single_stream_tokens_per_s > t.tokens_per_s_per_user
    u = r.users
    assert u.active_by_memory == int(m.sequences_fit)
    assert u.users_by_memory == int(u.active_by_memory / 0.10)
    assert u.users_total == min(u.users_by_memory, u.users_by_throughput)
    assert r.is_estimate and len(r.assumptions) >= 4


def test_fp8_kv_halves_the_sequence_and_tp_shards_it() -> None:
    base = size("Qwen/Qwen3-32B", "H200", max_model_len=40_960)
    fp8 = size("Qwen/Qwen3-32B", "H200", max_model_len=40_960, kv_cache_dtype="fp8")
    assert fp8.memory.kv_per_sequence_gib == base.memory.kv_per_sequence_gib / 2
    tp2 = size("Qwen/Qwen3-32B", "H200", gpus=2, max_model_len=40_960)
    assert tp2.deployment.tensor_parallel_size == 2
    assert tp2.memory.kv_bytes_per_token == base.memory.kv_bytes_per_token // 2
    assert tp2.memory.weights_gib == pytest.approx(base.memory.weights_gib / 2, abs=0.01)


def test_quantized_name_shrinks_weights_not_kv() -> None:
    bf16 = size("meta-llama/Llama-3.1-70B-Instruct", "H100", gpus=2)
    awq = size("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "H100", gpus=2)
    assert awq.deployment.model_quantization == "awq"
    assert awq.memory.kv_bytes_per_token == bf16.memory.kv_bytes_per_token
    assert awq.memory.weights_gib < bf16.memory.weights_gib / 3


def test_a_16_bit_build_of_an_fp8_model_weighs_twice_as_much() -> None:
    fp8 = size("deepseek-ai/DeepSeek-R1", "H200", gpus=8)
    bf16 = size("unsloth/DeepSeek-R1-BF16", "H200", gpus=8)
    assert bf16.memory.kv_bytes_per_token == fp8.memory.kv_bytes_per_token
    assert bf16.memory.weights_gib == pytest.approx(fp8.memory.weights_gib * 2 / 1.02, rel=0.01)
    assert fp8.fits and not bf16.fits
    # a precision suffix is not a quantization: the quantize fix is not withheld for it
    assert bf16.deployment.model_quantization is None


def test_does_not_fit_says_what_would() -> None:
    r = size("Llama 3 70B", "A100 80GB", max_model_len=8192)
    assert not r.fits
    assert r.verdict.startswith("Does not fit") and "--tensor-parallel-size 2" in r.verdict
    assert r.users.users_total == 0


def test_json_and_text() -> None:
    r = size("Qwen/Qwen3-30B-A3B", "L40S", gpus=2, tp=1, max_model_len=32_768)
    data = json.loads(json.dumps(r.model_dump(mode="json")))
    assert data["deployment"]["replicas"] == 2
    assert data["memory"]["kv_per_sequence_gib"] == pytest.approx(32_768 * 98_304 / GIB, abs=1e-3)
    text = render_size_text(r)
    assert text.splitlines()[1] == r.verdict
    for heading in ("KV cache memory", "Throughput (roofline", "Concurrent users", "Assumptions"):
        assert heading in text


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tp": 3}, "does not divide"), ({"gpus": 1, "tp": 2}, "fewer than"),
    ({"gpu_memory_utilization": 1.5}, "utilization"), ({"active_share": 0.0}, "share"),
])
def test_bad_input(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(SizeError, match=match):
        size("llama-3.1-8b", "H100", **kwargs)  # type: ignore[arg-type]


def test_unknown_names_are_value_errors_with_close_matches() -> None:
    with pytest.raises(UnknownName, match="close:"):
        size("llama-3.1-9b", "H100")
    with pytest.raises(ValueError, match="unknown GPU"):
        size("llama-3.1-8b", "Voodoo 5")
