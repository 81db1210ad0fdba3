"""Named checks that rank causes by the facts, and named conditions that withhold fixes.

The KB refers to these by name (a cause's `check`, a fix's `withhold_if`), so rules stay data
while the arithmetic stays in tested code. VALUES lists the names a fix template may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bot.schema import Facts, Sizing


@dataclass(frozen=True)
class CheckResult:
    """score None: the evidence cannot tell; 0.0: the facts contradict the cause."""

    score: float | None
    why: str


CheckFn = Callable[[Facts, Sizing | None], CheckResult]
ConditionFn = Callable[[Facts, Sizing | None], str | None]  # a reason to withhold, or None

CHECKS: dict[str, CheckFn] = {}
CONDITIONS: dict[str, ConditionFn] = {}

# Values the fix planner computes for templates (bot.sizing.plan fills them; None = unknown,
# and a fix needing an unknown value falls back to its `fallback_command` or is not offered).
PLANNED_VALUES: dict[str, str] = {
    "model_or_placeholder": "the model name, or MODEL when the evidence does not show it",
    "fit_max_model_len": "largest --max-model-len that fits the available KV memory (block-rounded)",
    "suggested_max_model_len": "a round value <= fit_max_model_len (e.g. 32768), for configs",
    "suggested_gpu_memory_utilization": "utilization that fits, within the safe 0.90-0.95 range",
    "utilization_fitting_free_memory": "largest utilization the free memory allows (foreign use)",
    "suggested_tensor_parallel_size": "smallest TP size (divides heads) whose budget fits",
    "suggested_max_num_batched_tokens": "a smaller --max-num-batched-tokens for the profile run",
    "suggested_max_num_seqs": "a smaller --max-num-seqs for sampler warm-up / CUDA graphs",
    "fp8_max_model_len": "largest --max-model-len that fits with --kv-cache-dtype fp8",
    "quantized_weights_gib": "weights after 4-bit quantization (AWQ/GPTQ)",
    "kv_bytes_per_token_h": "KV bytes per token, human readable (e.g. '128 KiB')",
    "kv_needed_at_fit_gib": "KV needed for one request at fit_max_model_len",
    "foreign_processes_h": "the other processes holding GPU memory, e.g. 'pid 4242 python 20.0 GiB'",
    "gpu_count_h": "GPUs seen on the host",
    "kv_cache_memory_suggested_bytes": "a --kv-cache-memory value that fits",
    "cpu_offload_gb_suggested": "--cpu-offload-gb that frees enough for the KV need",
}

# Names a fix template may use: every fact, every sizing field, and planner-computed values.
VALUES: frozenset[str] = frozenset(
    set(Facts.model_fields) | set(Sizing.model_fields) | set(PLANNED_VALUES)
)


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        return fn

    return register


def condition(name: str) -> Callable[[ConditionFn], ConditionFn]:
    def register(fn: ConditionFn) -> ConditionFn:
        CONDITIONS[name] = fn
        return fn

    return register
