"""Named checks that rank causes by the facts, and named conditions that withhold fixes.

The KB refers to these by name (a cause's `check`, a fix's `withhold_if`), so rules stay data
while the arithmetic stays in tested code. VALUES lists the names a fix template may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.schema import Facts, Sizing, field_names


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
    "fit_max_model_len": "largest --max-model-len that fits the available KV (block-rounded)",
    "suggested_max_model_len": "a round value <= fit_max_model_len (e.g. 32768), for configs",
    "suggested_gpu_memory_utilization": "utilization that fits, within the safe 0.90-0.95 range",
    "utilization_fitting_free_memory": "largest utilization the free memory allows (foreign use)",
    "suggested_tensor_parallel_size": "smallest TP size (divides heads) whose budget fits",
    "suggested_max_num_batched_tokens": "a smaller --max-num-batched-tokens for the profile run",
    "suggested_max_num_seqs": "a smaller --max-num-seqs for sampler warm-up / CUDA graphs",
    "fp8_max_model_len": "largest --max-model-len that fits with --kv-cache-dtype fp8",
    "fp8_target_max_model_len": "the asked length if it fits with fp8 KV, else fp8_max_model_len",
    "quantized_weights_gib": "weights after 4-bit quantization (AWQ/GPTQ)",
    "kv_bytes_per_token_h": "KV bytes per token, human readable (e.g. '128 KiB')",
    "kv_needed_at_fit_gib": "KV needed for one request at fit_max_model_len",
    "foreign_processes_h": "other processes holding GPU memory: 'pid 4242 python 20.00 GiB'",
    "gpu_count_h": "GPUs seen on the host",
    "kv_cache_memory_suggested_bytes": "a --kv-cache-memory value that fits",
    "cpu_offload_gb_suggested": "--cpu-offload-gb that frees enough for the KV need",
    # added with the planner (issue 3); all computed in bot.sizing.budget
    "target_max_model_len": "the max-model-len asked for (flag, else the model's maximum)",
    "utilization_needed": "utilization at which one max-model-len request fits (may be > 0.95)",
    "quantized_max_model_len": "largest --max-model-len once the weights are 4-bit",
    "fp8_weights_gib": "weights after FP8 weight quantization",
    "tp_max_model_len": "largest --max-model-len at suggested_tensor_parallel_size",
    "activation_saving_gib": "KV memory freed by suggested_max_num_batched_tokens (estimate)",
    "num_gpu_blocks": "KV blocks per worker (logged, else computed)",
    "headroom_gib": "GPU memory outside the budget, other processes and CUDA graphs",
    "utilization_effect_h": "what suggested_gpu_memory_utilization gives, e.g. '9.87 GiB of KV'",
}

# Names a fix template may use: every fact, every sizing field, and planner-computed values.
VALUES: frozenset[str] = frozenset(
    set(field_names(Facts)) | set(field_names(Sizing)) | set(PLANNED_VALUES)
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


# ---------------------------------------------------------------------------------------------
# The checks and conditions. Each reads Facts first and the Sizing second, works when either is
# partial, and quotes the numbers it used so the answer can show its work.

FOREIGN_MIN_GIB = 0.5  # less than this is a desktop/monitoring footprint, not a cause


def _extra(s: Sizing | None, name: str) -> Any:
    """A named figure of the Sizing: a typed field or one of its `extra` figures."""
    if s is None:
        return None
    return s.extra.get(name, getattr(s, name, None))


def _gib(x: float) -> str:
    return f"{x:.2f} GiB"


def _util(f: Facts, s: Sizing | None) -> float | None:
    u = f.gpu_memory_utilization if f.gpu_memory_utilization is not None else _extra(
        s, "gpu_memory_utilization")
    return None if u is None else float(u)


def _total(f: Facts, s: Sizing | None) -> float | None:
    t = f.gpu_total_gib if f.gpu_total_gib is not None else _extra(s, "gpu_total_gib")
    return None if t is None else float(t)


def _weights(f: Facts, s: Sizing | None) -> float | None:
    if f.weights_gib is not None:
        return f.weights_gib
    return s.weights_gib if s is not None else None


def _foreign(f: Facts, s: Sizing | None) -> float | None:
    g = f.foreign_processes_gib
    return float(g) if g is not None else _extra(s, "foreign_processes_gib")


def _gpu_count(f: Facts) -> int | None:
    return f.gpu_count or (len({g.parent_index if g.mig_instance else g.index for g in f.gpus})
                           if f.gpus else None)


def _free_check(f: Facts, s: Sizing | None) -> str | None:
    """The v0.9.1+ start-up check, in vLLM's own words, when it fails."""
    free, total, util = f.free_memory_gib, _total(f, s), _util(f, s)
    requested = f.requested_memory_gib
    if requested is None and total is not None and util is not None:
        requested = round(total * util, 2)
    if free is None or requested is None or free >= requested:
        return None
    of_total = f"/{total:.2f}" if total is not None else ""
    return (f"free memory {free:.2f}{of_total} GiB at start-up is below the requested "
            f"{requested:.2f} GiB (utilization {util})")


def foreign_processes_h(f: Facts) -> str | None:
    """'pid 4242 python 20.00 GiB, pid 77 memhog 1.50 GiB' from the non-server processes."""
    procs = [p for p in f.processes if p.is_server is False and p.used_mib]
    if not procs:
        return None
    return ", ".join(f"pid {p.pid} {p.name or '?'} {_gib((p.used_mib or 0) / 1024)}"
                     for p in procs)


@check("kv_needed_exceeds_available")
def _kv_needed(f: Facts, s: Sizing | None) -> CheckResult:
    if s is None:
        return CheckResult(None, "")
    ruled_out = _weights_rule_out(f, s, "max-model-len")
    if ruled_out:
        return ruled_out
    avail, needed = s.kv_cache_available_gib, s.kv_cache_needed_gib
    fit, length = s.max_model_len_that_fits, _extra(s, "target_max_model_len")
    if (avail is not None and avail <= 0) or fit == 0:
        return CheckResult(0.2, f"no KV memory at all ({_gib(avail or 0.0)} available): a "
                                "shorter max-model-len cannot help on its own")
    if needed is not None and avail is not None:
        verdict = "more than" if needed > avail else "within"
        why = (f"one request at max-model-len {length} needs {_gib(needed)} of KV cache, "
               f"{verdict} the {_gib(avail)} available")
        if fit:
            why += f"; the largest that fits is {fit}"
        return CheckResult(0.9 if needed > avail else 0.0, why)
    if fit is not None and length:
        too_long = length > fit
        return CheckResult(0.9 if too_long else 0.0,
                           f"max-model-len {length} {'exceeds' if too_long else 'is within'} the "
                           f"largest that fits ({fit})")
    return CheckResult(None, "")


@check("utilization_below_safe_range")
def _util_low(f: Facts, s: Sizing | None) -> CheckResult:
    util = _util(f, s)
    if util is None:
        return CheckResult(None, "")
    blocked = _withhold_raise(f, s)
    if blocked:
        return CheckResult(0.0, blocked)
    if util >= 0.95:
        return CheckResult(0.0, f"gpu_memory_utilization is already {util:.2f}, the top of the "
                                "safe 0.90-0.95 range")
    need = _extra(s, "utilization_needed")
    if need is not None and need > 0.95:
        return CheckResult(0.15, f"even 0.95 is not enough: the KV need calls for "
                                 f"utilization {need:.3f}")
    if util < 0.90:
        return CheckResult(0.8, f"gpu_memory_utilization {util:.2f} is below the safe "
                                "0.90-0.95 range for a dedicated GPU")
    if need is not None and need > util:
        return CheckResult(0.7, f"utilization {need:.3f} (from {util:.2f}) would make one "
                                "request at max-model-len fit")
    return CheckResult(None, "")


@check("weights_dominate_budget")
def _weights_dominate(f: Facts, s: Sizing | None) -> CheckResult:
    w = _weights(f, s)
    budget = f.budget_gib if f.budget_gib is not None else (s.budget_gib if s else None)
    if not budget:
        return CheckResult(None, "")
    non_kv = _extra(s, "non_kv_gib")
    if non_kv is not None:
        # budget - available: exact when the log printed the KV figure, and it includes the
        # activation and non-torch terms, so it beats a catalog estimate of the weights.
        used = float(non_kv)
        est = " (estimated)" if f.weights_gib is None else ""
        shown = f"weights {_gib(w)}{est} + " if w is not None else "weights + "
        why = f"{shown}activation + non-torch take {_gib(used)} of a {_gib(budget)} budget"
    elif w is not None:
        used = w
        est = " (estimated)" if f.weights_gib is None else ""
        why = f"weights {_gib(w)}{est} of a {_gib(budget)} budget"
    else:
        return CheckResult(None, "")
    share = used / budget
    why += f" ({share:.0%})"
    if share >= 0.9:
        return CheckResult(0.85, why)
    if share >= 0.7:
        return CheckResult(0.55, why)
    return CheckResult(0.0 if share < 0.5 else 0.25, why)


def _weights_rule_out(f: Facts, s: Sizing | None, what: str) -> CheckResult | None:
    """When the weights alone exceed what any safe budget holds, no lesser term is the cause."""
    reason = _weights_over_safe(f, s)
    if reason is None:
        return None
    return CheckResult(0.0, reason.split(":")[0] + f": {what} cannot be the cause")


@check("tensor_parallel_too_small")
def _tp_small(f: Facts, s: Sizing | None) -> CheckResult:
    tp = (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1)
    count = _gpu_count(f)
    w, total = _weights(f, s), _total(f, s)
    if w is not None and total and w > total:
        return CheckResult(0.9, f"weights {_gib(w)} per rank exceed one GPU's {_gib(total)} "
                                f"at TP x PP = {tp}")
    if count is not None and count > tp:
        return CheckResult(0.7, f"the host shows {count} GPUs and TP x PP uses {tp}")
    if count is not None:
        return CheckResult(0.1, f"all {count} GPU(s) already in use (TP x PP = {tp}); more TP "
                                "needs more GPUs")
    return CheckResult(None, "")


@check("foreign_process_memory")
def _foreign_check(f: Facts, s: Sizing | None) -> CheckResult:
    foreign = _foreign(f, s)
    who = foreign_processes_h(f)
    if foreign is not None and foreign > FOREIGN_MIN_GIB:
        return CheckResult(0.9, f"other processes hold {_gib(foreign)}"
                                + (f" ({who})" if who else ""))
    failed = _free_check(f, s)
    if failed:
        return CheckResult(0.85, failed)
    if foreign is not None:
        return CheckResult(0.0, f"other processes hold only {_gib(foreign)}")
    if f.processes and all(p.is_server for p in f.processes):
        return CheckResult(0.0, "nvidia-smi shows only the server's processes")
    return CheckResult(None, "")


@check("activation_peak_large")
def _activation(f: Facts, s: Sizing | None) -> CheckResult:
    ruled_out = _weights_rule_out(f, s, "the activation peak")
    if ruled_out:
        return ruled_out
    act = f.activation_peak_gib
    mnbt = f.max_num_batched_tokens
    budget = f.budget_gib if f.budget_gib is not None else (s.budget_gib if s else None)
    if act is not None and budget:
        share = act / budget
        why = f"activation peak {_gib(act)} ({share:.0%} of the {_gib(budget)} budget"
        why += f", max_num_batched_tokens {mnbt})" if mnbt else ")"
        return CheckResult(0.7 if share >= 0.1 or act >= 4 else 0.1, why)
    if mnbt is not None and mnbt >= 16384:
        return CheckResult(0.5, f"max_num_batched_tokens {mnbt} sizes a large profile batch")
    if f.enable_chunked_prefill is False and f.max_model_len and f.max_model_len >= 32768:
        return CheckResult(0.5, f"chunked prefill off: the profile batch is max-model-len "
                                f"({f.max_model_len}) tokens")
    return CheckResult(None, "")


@check("cuda_graph_memory")
def _cuda_graphs(f: Facts, s: Sizing | None) -> CheckResult:
    ruled_out = _weights_rule_out(f, s, "CUDA-graph memory")
    if ruled_out:
        return ruled_out
    if f.enforce_eager:
        return CheckResult(0.0, "--enforce-eager is set: no CUDA graphs are captured")
    graphs = f.cuda_graph_gib
    if graphs is None:
        return CheckResult(None, "")
    headroom = _extra(s, "headroom_gib")
    why = f"CUDA graphs take {_gib(graphs)}"
    if headroom is not None:
        why += f" against {_gib(float(headroom))} left outside the budget"
    big = graphs >= 1.0 or (headroom is not None and graphs >= float(headroom) * 0.5)
    return CheckResult(0.7 if big else 0.15, why)


@check("sampler_warmup_oom")
def _sampler(f: Facts, s: Sizing | None) -> CheckResult:
    ruled_out = _weights_rule_out(f, s, "the sampler warm-up")
    if ruled_out:
        return ruled_out
    seqs = f.max_num_seqs
    if seqs is not None and seqs >= 512:
        return CheckResult(0.5, f"max_num_seqs {seqs} dummy requests in the sampler warm-up")
    return CheckResult(None, "")


@check("kv_cache_not_fp8")
def _not_fp8(f: Facts, s: Sizing | None) -> CheckResult:
    if (f.kv_cache_dtype or "").startswith("fp8"):
        return CheckResult(0.0, f"the KV cache is already {f.kv_cache_dtype}")
    ruled_out = _weights_rule_out(f, s, "the KV cache dtype")
    if ruled_out:
        return ruled_out
    fp8_fit, length = _extra(s, "fp8_max_model_len"), _extra(s, "target_max_model_len")
    fit = s.max_model_len_that_fits if s else None
    if fp8_fit is None or not length:
        return CheckResult(None, "")
    why = f"with --kv-cache-dtype fp8 the largest max-model-len becomes {fp8_fit} (now {fit})"
    if fit is not None and fit >= length:
        # One request fits already; fp8 still doubles the sequences the pool holds, which is
        # what a preempting, queueing server needs.
        pressure = (f.preemptions or 0) > 0 or (f.gpu_kv_cache_usage_pct or 0) >= 90
        blocks = _extra(s, "num_gpu_blocks")
        more = f"; it doubles the KV pool ({blocks} blocks now)" if blocks else ""
        return CheckResult(0.5 if pressure else 0.0, f"one request at {length} fits already"
                           + (more if pressure else ""))
    return CheckResult(0.6 if fp8_fit >= length else 0.25, why + f" against {length} asked")


@check("concurrency_exceeds_kv")
def _concurrency(f: Facts, s: Sizing | None) -> CheckResult:
    usage, pre, waiting = f.gpu_kv_cache_usage_pct, f.preemptions, f.waiting_requests
    parts = []
    if usage is not None:
        parts.append(f"KV cache usage {usage:.1f}%")
    if pre:
        parts.append(f"{pre} preemptions")
    if waiting:
        parts.append(f"{waiting} requests waiting")
    why = ", ".join(parts)
    if (usage is not None and usage >= 90) or pre:
        return CheckResult(0.8, why)
    if usage is not None and usage < 70:
        return CheckResult(0.05, why)
    return CheckResult(None, why)


@check("weights_exceed_gpu")
def _weights_gpu(f: Facts, s: Sizing | None) -> CheckResult:
    w, total = _weights(f, s), _total(f, s)
    if w is None or not total:
        return CheckResult(None, "")
    est = " (estimated)" if f.weights_gib is None else ""
    why = f"weights {_gib(w)}{est} per GPU against {_gib(total)} of GPU memory"
    if w > total:
        return CheckResult(0.95, why)
    if w > total * 0.95:
        return CheckResult(0.7, why)
    return CheckResult(0.0, why)


def _withhold_raise(f: Facts, s: Sizing | None) -> str | None:
    return _foreign_holds(f, s) or _weights_over_safe(f, s)


@condition("foreign_process_holds_memory")
def _foreign_holds(f: Facts, s: Sizing | None) -> str | None:
    foreign = _foreign(f, s)
    if foreign is not None and foreign > FOREIGN_MIN_GIB:
        who = foreign_processes_h(f)
        return (f"other processes hold {_gib(foreign)}" + (f" ({who})" if who else "")
                + ": raising utilization cannot use memory they hold")
    failed = _free_check(f, s)
    return f"{failed}: raising utilization makes the start-up check fail harder" if failed else None


@condition("weights_exceed_budget_at_safe_max")
def _weights_over_safe(f: Facts, s: Sizing | None) -> str | None:
    w, total = _weights(f, s), _total(f, s)
    if w is None or not total or w <= total * 0.95:
        return None
    est = ", estimated" if f.weights_gib is None else ""
    return (f"weights alone ({_gib(w)}{est}) exceed 0.95 x {_gib(total)} = "
            f"{_gib(total * 0.95)}: no safe utilization leaves room for the KV cache")


@condition("utilization_at_safe_max")
def _util_max(f: Facts, s: Sizing | None) -> str | None:
    util = _util(f, s)
    if util is not None and util >= 0.95:
        return f"gpu_memory_utilization is already {util:.2f}, the top of the safe range"
    return None


# The most memory any GPU in knowledge/gpus.yaml has (B200 / MI300X class); a test keeps the
# two in step. Bounds what a utilization raise can add when the host's total is unknown.
LARGEST_GPU_GIB = 192.0


@condition("utilization_cannot_fit")
def _util_cannot_fit(f: Facts, s: Sizing | None) -> str | None:
    need = _extra(s, "utilization_needed")
    if need is not None and need > 0.95:
        return (f"the KV need calls for utilization {need:.3f}, above the safe 0.95: raising it "
                "alone cannot make one request fit")
    needed = f.kv_cache_needed_gib if f.kv_cache_needed_gib is not None else (
        s.kv_cache_needed_gib if s else None)
    avail = f.kv_cache_available_gib if f.kv_cache_available_gib is not None else (
        s.kv_cache_available_gib if s else None)
    if needed is None or avail is None or needed <= avail:
        return None
    cur = _util(f, s) or 0.9
    total = _total(f, s)
    gain = max(0.0, 0.95 - cur) * (total or LARGEST_GPU_GIB)
    if needed - avail > gain:
        on = "" if total else f" even on a {LARGEST_GPU_GIB:.0f} GiB GPU"
        return (f"one request needs {_gib(needed - avail)} more KV cache; raising utilization "
                f"from {cur:g} to 0.95 adds at most {_gib(gain)}{on}")
    return None


@condition("no_spare_gpus")
def _no_spare(f: Facts, s: Sizing | None) -> str | None:
    count = _gpu_count(f)
    used = (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1)
    if count is not None and count <= used:
        return f"the host shows {count} GPU(s) and TP x PP already uses {used}"
    return None


@condition("gpu_count_unknown")
def _count_unknown(f: Facts, s: Sizing | None) -> str | None:
    if _gpu_count(f) is None:
        return ("the evidence does not show how many GPUs this host has (`nvidia-smi -L` "
                "lists them); see the next-larger host instead")
    return None


@condition("host_has_enough_gpus")
def _enough_gpus(f: Facts, s: Sizing | None) -> str | None:
    count = _gpu_count(f)
    want = _extra(s, "suggested_tensor_parallel_size")
    if count is not None and isinstance(want, int) and count >= want:
        return f"not needed: this host already has {count} GPUs"
    return None


@condition("kv_cache_already_fp8")
def _already_fp8(f: Facts, s: Sizing | None) -> str | None:
    kv = f.kv_cache_dtype or ""
    return f"the KV cache is already {kv}" if kv.startswith("fp8") else None


@condition("already_quantized")
def _already_quantized(f: Facts, s: Sizing | None) -> str | None:
    q = f.quantization or _extra(s, "model_quantization")
    return f"the weights are already quantized ({q})" if q else None


@condition("nothing_fits")
def _nothing_fits(f: Facts, s: Sizing | None) -> str | None:
    avail = s.kv_cache_available_gib if s else f.kv_cache_available_gib
    blocks = f.gpu_blocks if f.gpu_blocks is not None else _extra(s, "num_gpu_blocks")
    if (avail is not None and avail <= 0) or blocks == 0:
        return (f"no KV memory at all ({_gib(avail or 0.0)} available, {blocks or 0} blocks): "
                "a shorter max-model-len cannot help")
    return None


@condition("already_eager")
def _eager(f: Facts, s: Sizing | None) -> str | None:
    return "--enforce-eager is already set" if f.enforce_eager else None
