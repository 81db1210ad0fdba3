"""Print vllm-memory.md section 7 next to what bot.sizing computes, and the planner's speed.

Usage: python -m bench.bench_sizing (from the repository root; prints, not a test)
"""

from __future__ import annotations

import time

from bot.schema import Facts, ProblemMatch
from bot.sizing.catalog import models
from bot.sizing.kv import GIB, KvLayout

W = 0.005  # vLLM prints GiB to 2 decimals


def row(name: str, logged: str, ours: str) -> None:
    print(f"{name:<44} {logged:>22} {ours:>26}")


def main() -> None:
    m = models()
    row("example", "vLLM logged", "bot.sizing")
    q14 = KvLayout.build(m["Qwen/Qwen3-14B"])
    row("Qwen3-14B 6.51 GiB tokens", "42,656", f"{q14.tokens(q14.num_blocks(6.51 * GIB)):,}")
    l8 = KvLayout.build(m["meta-llama/Llama-3.1-8B-Instruct"], hybrid=False)
    lo, hi = l8.num_blocks((3.81 - W) * GIB), l8.num_blocks((3.81 + W) * GIB)
    row("Llama-3.1-8B V0 3.81 GiB blocks", "1952", f"{lo}-{hi}")
    fp8 = KvLayout.build(m["Qwen/Qwen3-30B-A3B"], kv_cache_dtype="fp8")
    lo, hi = fp8.max_model_len((5.59 - W) * GIB), fp8.max_model_len((5.59 + W) * GIB)
    row("fp8 KV 5.59 GiB estimated max len", "122,080", f"{lo:,}-{hi:,}")
    coder = KvLayout.build(m["Qwen/Qwen3-Coder-480B-A35B-Instruct"])
    row("Qwen3-Coder-480B at 262,144", "62.00 GiB", f"{coder.needed_bytes(262_144) / GIB:.2f} GiB")
    mla = KvLayout.build(m["deepseek-ai/DeepSeek-V2-Lite-Chat"], tp=2, pp=2)
    blocks = mla.num_blocks([12.13 * GIB, 11.33 * GIB])
    row("DeepSeek-V2-Lite TP2 PP2 tokens", "807,792", f"{mla.tokens(blocks):,} (+-{W} GiB)")

    from bot.kb.loader import load_kb
    from bot.sizing.plan import plan

    kb = load_kb()
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072,
                  gpu_total_gib=22.05, gpu_memory_utilization=0.9, weights_gib=14.99,
                  kv_cache_needed_gib=16.0, kv_cache_available_gib=2.5)
    problems = [ProblemMatch(id="max-model-len-exceeds-kv-cache", title="", confidence=0.9)]
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        plan(kb, problems, facts)
    print(f"\nplanner: {(time.perf_counter() - t) / n * 1e3:.2f} ms per plan (shipped KB)")


if __name__ == "__main__":
    main()
