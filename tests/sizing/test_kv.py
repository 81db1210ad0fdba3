"""KV bytes per token/block and the block arithmetic, against vLLM's own printed figures.

Every expected number comes from figures real vLLM logs printed, or from the models'
config.json values in data/model_configs.json. A value vLLM printed as X.XX GiB is only good
to +-0.005 GiB, so those checks assert the logged count lies inside the range our formula
gives across that window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.sizing.catalog import ModelSpec, models, spec_from_config
from bot.sizing.kv import GIB, KvLayout, kv_heads_per_rank, pp_split

DATA = Path(__file__).parent / "data"
CONFIGS = json.loads((DATA / "model_configs.json").read_text())["models"]
WINDOW = 0.005


def spec(model_id: str) -> ModelSpec:
    return models()[model_id]


def window(gib: float, fn: Callable[[float], int]) -> tuple[int, int]:
    return fn((gib - WINDOW) * GIB), fn((gib + WINDOW) * GIB)


def _expected(entry: dict[str, dict[str, int]]) -> int:
    d = entry["derived"]
    return d.get("kv_bytes_per_token_bf16_tp1") or d["kv_bytes_per_token_bf16_any_tp"]


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_bytes_per_token_matches_reference_for_catalog_and_raw_config(key: str) -> None:
    entry = CONFIGS[key]
    model_id = key.split(" (")[0]
    assert KvLayout.build(spec(model_id)).bytes_per_token == _expected(entry)
    assert KvLayout.build(spec_from_config(entry["config"])).bytes_per_token == _expected(entry)


def test_all_22_reference_models_are_in_the_catalog() -> None:
    assert len(CONFIGS) == 22
    assert {k.split(" (")[0] for k in CONFIGS} <= set(models())


def test_qwen3_14b_v1_tokens_and_concurrency() -> None:
    """#1 LMCache #1739: 6.51 GiB -> 42,656 tokens, 1.30x at 32,768."""
    lay = KvLayout.build(spec("Qwen/Qwen3-14B"))
    assert lay.bytes_per_token == 163_840
    assert lay.num_blocks(6.51 * GIB) == 2666
    assert lay.tokens(2666) == 42_656
    lo, hi = window(6.51, lambda b: lay.tokens(lay.num_blocks(b)))
    assert (lo, hi) == (42_624, 42_688)
    assert round(lay.concurrency(2666, 32_768), 2) == 1.30


def test_llama_8b_v0_blocks_concurrency_and_cpu_blocks() -> None:
    """#2 vllm #10517 (V0): 1952 blocks / 1.56x; 1478 blocks = 23,648 tokens; 2048 CPU blocks."""
    lay = KvLayout.build(spec("meta-llama/Llama-3.1-8B-Instruct"), hybrid=False)
    assert lay.bytes_per_block == 2 * 1024 * 1024
    lo, hi = window(3.81, lay.num_blocks)
    assert lo <= 1952 <= hi
    assert round(lay.concurrency(1952, 20_000, v0=True), 2) == 1.56
    lo, hi = window(2.89, lay.num_blocks)
    assert lo <= 1478 <= hi
    assert lay.tokens(1478) == 23_648 < 29_000
    assert round(lay.concurrency(1478, 29_000, v0=True), 2) == 0.82
    assert 4 * GIB // lay.bytes_per_block == 2048


def test_fp8_kv_cache_issue_25350() -> None:
    """#3: Qwen3-30B-A3B geometry at 1 byte: 10.12 GiB at 221,000; 122,080; 230,528 / 2.31x."""
    lay = KvLayout.build(spec("Qwen/Qwen3-30B-A3B"), kv_cache_dtype="fp8")
    assert lay.bytes_per_token == 49_152
    assert f"{lay.needed_bytes(221_000) / GIB:.2f}" == "10.12"
    lo, hi = window(5.59, lay.max_model_len)
    assert lo <= 122_080 <= hi and 122_080 % 16 == 0
    lo, hi = window(10.55, lambda b: lay.tokens(lay.num_blocks(b)))
    assert lo <= 230_528 <= hi
    assert round(lay.concurrency(14_408, 100_000), 2) == 2.31
    # fp8 halves the 16-bit figure exactly
    assert KvLayout.build(spec("Qwen/Qwen3-30B-A3B")).bytes_per_token == 2 * 49_152


def test_qwen3_coder_480b_recipes_pr12() -> None:
    """#4: 62.00 GiB exactly at 262,144; estimates 205,728 and 235,296."""
    lay = KvLayout.build(spec("Qwen/Qwen3-Coder-480B-A35B-Instruct"))
    assert lay.bytes_per_token == 253_952
    assert lay.needed_bytes(262_144) == 62 * GIB
    for gib, logged in ((48.66, 205_728), (55.65, 235_296)):
        lo, hi = window(gib, lay.max_model_len)
        assert lo <= logged <= hi


def test_mla_deepseek_v2_lite_no_factor_two() -> None:
    """#5 vllm #15871: 27 x 576 x 2 = 31,104 B/token; 0.95 GiB at 32,768."""
    lay = KvLayout.build(spec("deepseek-ai/DeepSeek-V2-Lite-Chat"))
    assert lay.bytes_per_token == 31_104
    assert f"{lay.needed_bytes(32_768) / GIB:.2f}" == "0.95"
    # one latent head on every TP rank: TP does not shrink MLA's per-rank KV
    assert KvLayout.build(spec("deepseek-ai/DeepSeek-V2-Lite-Chat"), tp=8).bytes_per_token == 31_104


def test_pp_split_smallest_stage_decides_pr_20665() -> None:
    """#6: TP=2 PP=2, [14, 13] layers, 12.13/11.33 GiB -> 807,792 tokens, 788.86x at 1,024."""
    lay = KvLayout.build(spec("deepseek-ai/DeepSeek-V2-Lite-Chat"), tp=2, pp=2)
    assert [s.layers for s in lay.stages] == [14, 13]
    assert lay.stages[0].page_bytes == 18_432
    lo = lay.num_blocks([(12.13 - WINDOW) * GIB, (11.33 - WINDOW) * GIB])
    hi = lay.num_blocks([(12.13 + WINDOW) * GIB, (11.33 + WINDOW) * GIB])
    assert (lo, hi) == (50_452, 50_493)
    assert lo <= 50_487 <= hi and lay.tokens(50_487) == 807_792
    assert round(lay.concurrency(50_487, 1024), 2) == 788.86


@pytest.mark.parametrize(("layers", "pp", "split"), [
    (27, 2, [14, 13]), (61, 4, [15, 15, 16, 15]), (80, 3, [27, 27, 26]), (32, 1, [32])])
def test_get_pp_indices_remainder_rule(layers: int, pp: int, split: list[int]) -> None:
    assert pp_split(layers, pp) == split


def test_startup_check_values() -> None:
    """#7: requested = total x utilization, rounded as vLLM prints it."""
    assert round(47.38 * 0.95, 2) == 45.01
    assert round(139.72 * 0.9, 2) == 125.75


def test_qwen25_math_v0_blocks() -> None:
    """V0 Qwen2.5-Math-1.5B: 15.52 GiB -> ~36,326 (logged 36,332 in range); 9362 CPU; 141.92x."""
    lay = KvLayout.build(spec("Qwen/Qwen2.5-Math-1.5B"), hybrid=False)
    assert lay.bytes_per_block == 458_752
    assert abs(lay.num_blocks(15.52 * GIB) - 36_326) <= 1
    lo, hi = window(15.52, lay.num_blocks)
    assert lo <= 36_332 <= hi
    assert 4 * GIB // lay.bytes_per_block == 9362
    assert round(lay.concurrency(36_332, 4096, v0=True), 2) == 141.92


def test_gqa_replication_and_head_dim_override() -> None:
    qwen7 = spec("Qwen/Qwen2.5-7B-Instruct")  # 4 KV heads
    assert [kv_heads_per_rank(qwen7, tp) for tp in (1, 2, 4, 8)] == [4, 2, 1, 1]
    assert KvLayout.build(qwen7, tp=8).bytes_per_token == 57_344 // 4
    # Qwen3-32B: head_dim 128, not 5120 / 64 = 80
    assert KvLayout.build(spec("Qwen/Qwen3-32B")).bytes_per_token == 2 * 64 * 8 * 128 * 2


def test_sliding_window_hybrid_manager_gemma2() -> None:
    """Gemma-2-9B: 21 sliding + 21 global -> 2 groups of 21; tokens = blocks // 2 * 16."""
    lay = KvLayout.build(spec("google/gemma-2-9b-it"))
    stage = lay.stages[0]
    assert (stage.full_layers, stage.sliding_layers, stage.num_groups) == (21, 21, 2)
    blocks = lay.num_blocks(10 * GIB)
    assert blocks == 10 * GIB // (131_072 * 21)
    assert lay.tokens(blocks) == blocks // 2 * 16
    # The sliding group's need saturates at window - 1 + max_num_batched_tokens, so the
    # longest request is longer than the pool's token count would suggest...
    fit = lay.max_model_len(10 * GIB, 2048)
    sliding_cap = -(-(4095 + 2048) // 16) + 1
    assert fit == (blocks - sliding_cap) * 16
    assert lay.needed_bytes(fit, 2048) <= 10 * GIB < lay.needed_bytes(fit + 1, 2048)
    # ...while V0 / the disabled hybrid manager size every layer as full attention.
    flat = KvLayout.build(spec("google/gemma-2-9b-it"), hybrid=False)
    assert flat.max_model_len(10 * GIB) == 10 * GIB // (131_072 * 42) * 16


def test_sliding_layout_from_raw_configs() -> None:
    gemma3 = spec_from_config({
        "model_type": "gemma3_text", "num_hidden_layers": 62, "hidden_size": 5376,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
        "sliding_window": 1024, "sliding_window_pattern": 6})
    assert gemma3.sliding_layers == 52
    assert sum(gemma3.sliding_mask()) == 52
    qwen2 = spec_from_config({**CONFIGS["Qwen/Qwen2.5-7B-Instruct"]["config"]})
    assert qwen2.sliding_layers == 0  # use_sliding_window: false
    mistral01 = spec_from_config({"model_type": "mistral", "num_hidden_layers": 32,
                                  "hidden_size": 4096, "num_attention_heads": 32,
                                  "num_key_value_heads": 8, "sliding_window": 4096})
    assert all(mistral01.sliding_mask())
