"""The conditions a KB entry may name, implemented: one registered function per name that
bot.kb.vocabulary declares (a test keeps the two sets equal).

A condition is a fact about this incident, worked out from the facts and the sizing, that
returns the sentence which proves it (with the numbers it used) or None when it does not hold.
The KB names them: a cause's `supports` and `rules_out`, a fix's `withhold_if`. So the rules
stay data while the arithmetic stays in tested code.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.fmt import gib
from bot.schema import Facts, Sizing, SizingFigures
from bot.sizing.budget import DEFAULT_UTIL
from bot.sizing.catalog import UnknownName, resolve_gpu

ConditionFn = Callable[[Facts, Sizing | None], str | None]  # the proof, or None

CONDITIONS: dict[str, ConditionFn] = {}  # name -> implementation

def condition(name: str) -> Callable[[ConditionFn], ConditionFn]:
    def register(fn: ConditionFn) -> ConditionFn:
        CONDITIONS[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# The checks and conditions. Each reads Facts first and the Sizing second, works when either is
# partial, and quotes the numbers it used so the answer can show its work.

FOREIGN_MIN_GIB = 0.5  # less than this is a desktop/monitoring footprint, not a cause
COMMON_GPU_GIB = 79.0  # an 80 GB A100/H100 as the CUDA runtime reports it (79.1-79.6 GiB)


def figures(s: Sizing | None) -> SizingFigures:
    """The Sizing's working figures; all unknown when there is no sizing."""
    return s.extra if s is not None else SizingFigures()


def _util(f: Facts, s: Sizing | None) -> float | None:
    u = f.gpu_memory_utilization
    if u is None:
        u = figures(s).gpu_memory_utilization
    return None if u is None else float(u)


def _total(f: Facts, s: Sizing | None) -> float | None:
    t = f.gpu_total_gib if f.gpu_total_gib is not None else figures(s).gpu_total_gib
    return None if t is None else float(t)


def _loaded(f: Facts) -> bool:
    """The paste shows the weights loaded: the server measured a KV cache, sized blocks, or
    got past loading. An estimate of the weights never outweighs that."""
    return (f.kv_cache_available_gib is not None or f.gpu_blocks is not None
            or f.kv_cache_tokens is not None
            or f.phase in ("profiling", "cuda-graph", "warmup", "serving"))


def _weights(f: Facts, s: Sizing | None) -> float | None:
    """The weights per GPU: the log's figure, else the estimate, unless the estimate cannot
    be right (more than the GPU holds, while the paste shows the server got past loading:
    an expert-parallel or otherwise sharded layout the estimate does not know)."""
    if f.weights_gib is not None:
        return f.weights_gib
    w = s.weights_gib if s is not None else None
    total = _total(f, s)
    if w is not None and total and w > total * 0.95 and _loaded(f):
        return None
    return w


def _foreign(f: Facts, s: Sizing | None) -> float | None:
    g = f.foreign_processes_gib
    return float(g) if g is not None else figures(s).foreign_processes_gib


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
    return ", ".join(" ".join(w for w in (f"pid {p.pid}", p.name, gib((p.used_mib or 0) / 1024))
                              if w) for p in procs)


# -- another tenant on the GPU ----------------------------------------------------------------

def _too_little_to_matter(f: Facts, held: float) -> bool:
    """What others hold could not have made the failed allocation fit: a 58 GiB request with
    47.69 GiB free is short by more than another process's 3.24 GiB, so stopping it is not
    the fix (the request is)."""
    tried, free = f.oom_tried_to_allocate_gib, f.oom_free_gib
    return tried is not None and free is not None and held < tried - free


@condition("other_process_memory")
def _other_process(f: Facts, s: Sizing | None) -> str | None:
    foreign = _foreign(f, s)
    if foreign is None or foreign <= FOREIGN_MIN_GIB or _too_little_to_matter(f, foreign):
        return None
    torch_seen = any(p.source == "torch" and p.is_server is False for p in f.processes)
    who = foreign_processes_h(f)
    where = " (torch's OOM message lists it)" if torch_seen else ""
    return (f"other processes hold {gib(foreign)}" + (f": {who}" if who else "") + where)


@condition("memory_outside_pytorch")
def _outside(f: Facts, s: Sizing | None) -> str | None:
    """Memory in use that the failing process does not hold. torch >= 2.2 says what that
    process holds ("this process has"), so total - free - that is someone else's even where
    torch could list nobody (another container's processes); torch <= 2.0 names no process,
    but total - free - reserved is memory the allocator does not hold, and beyond a CUDA
    context (~0.5-1.5 GiB) it belongs to someone else."""
    total, in_use = _total(f, s), f.oom_process_in_use_gib
    if in_use and total is not None and f.oom_free_gib is not None:
        # torch >= 2.2 said what the failing process holds: the rest of the used memory is
        # someone else's, whether or not NVML let torch list them (another container's are not)
        others = total - f.oom_free_gib - in_use
        if others < max(2.0, 0.1 * total) or _too_little_to_matter(f, others):
            return None
        return (f"{gib(others)} of the {gib(total)} GPU was in use by others: the failing "
                f"process held {gib(in_use)} and {gib(f.oom_free_gib)} was free")
    out = f.oom_outside_pytorch_gib
    if out is None or total is None or out < max(2.0, 0.1 * total):
        return None
    if any(p.is_server for p in f.processes):
        return None  # torch accounted for this process; other_process_memory covers the rest
    return (f"{gib(out)} of the {gib(total)} GPU was neither free nor held by the failing "
            "process's PyTorch allocator: another process holds it")


@condition("server_memory_outside_pytorch")
def _server_outside(f: Facts, s: Sizing | None) -> str | None:
    """The failing process itself holds far more than its PyTorch allocator: beyond a CUDA
    context and libraries (1-2 GiB), that is a pool the engine allocated outside PyTorch
    (lmdeploy TurboMind's KV cache, TensorRT-LLM's), which leaves PyTorch's own work (a vision
    encoder, sampling) no room. vLLM and SGLang keep their KV cache in PyTorch tensors."""
    out, in_use = f.oom_process_outside_pytorch_gib, f.oom_process_in_use_gib
    if in_use is None:
        in_use = next(((p.used_mib or 0) / 1024 for p in f.processes
                       if p.is_server and p.source == "torch"), None)
    if out is None or in_use is None or out < max(4.0, 0.4 * in_use):
        return None
    return (f"the failing process holds {gib(in_use)}, of which {gib(out)} is outside "
            "PyTorch's allocator: a pool the engine allocated itself (a KV cache outside "
            "PyTorch) has taken the GPU")


@condition("memory_in_use_before_start")
def _used_before(f: Facts, s: Sizing | None) -> str | None:
    used, total = f.used_before_start_gib, _total(f, s)
    if used is None and f.profile_start_used_gib is not None:
        w = _weights(f, s)
        if w is None:
            return None
        used = f.profile_start_used_gib - w
    if used is None or used < max(1.0, 0.05 * (total or 0.0)):
        return None
    of = f" of {gib(total)}" if total else ""
    return f"{gib(used)}{of} was already in use before this server allocated anything"


@condition("startup_free_check_failed")
def _free_failed(f: Facts, s: Sizing | None) -> str | None:
    return _free_check(f, s)


@condition("several_engines_on_gpu")
def _engines(f: Facts, s: Sizing | None) -> str | None:
    n = f.engines_on_gpu or 0
    if n < 2:
        return None
    return (f"the paste starts {n} inference engines on the same GPU; each sizes itself "
            "against the whole device, so the later ones find the memory taken")


@condition("trainer_shares_gpu")
def _trainer(f: Facts, s: Sizing | None) -> str | None:
    if not f.trainer_on_gpu:
        return None
    return ("a trainer (GRPO/RLHF) runs next to the vLLM engine it drives; its model, "
            "gradients and optimizer state take the memory vLLM sized itself against")


@condition("training_run")
def _training(f: Facts, s: Sizing | None) -> str | None:
    """A training run's own steps (rollouts, log-probs, backward) take the GPU after start."""
    if not f.training_run:
        return None
    return "the paste is from a training run, whose steps use the GPU after the engine started"


@condition("non_torch_implausible")
def _non_torch_odd(f: Facts, s: Sizing | None) -> str | None:
    """Early V1 counts every process's memory as this server's non-torch memory."""
    nt = f.non_torch_gib
    if nt is None or nt < 4.0:
        return None
    return (f"{gib(nt)} of non-torch memory is several times normal (0.1-2 GiB for the CUDA "
            "context, cuBLAS and NCCL): another process on the GPU is the usual reason")


@condition("profile_implausible")
def _profile_odd(f: Facts, s: Sizing | None) -> str | None:
    """A profile whose activation and non-torch terms outweigh the weights: for a model of this
    size that is several times normal, and another process's memory is the usual reason."""
    act, nt, w = f.activation_peak_gib, f.non_torch_gib, _weights(f, s)
    if act is None or w is None:
        return None
    extra = act + (nt or 0.0)
    if extra < max(6.0, w):
        return None
    model = f" for {f.model}" if f.model else ""
    return (f"{gib(extra)} of activation and non-torch memory{model} (weights {gib(w)}) is "
            "several times normal: look for another process on the GPU")


@condition("only_server_on_gpu")
def _only_server(f: Facts, s: Sizing | None) -> str | None:
    foreign = _foreign(f, s)
    if foreign is not None and foreign <= FOREIGN_MIN_GIB and f.processes:
        return f"the only memory on the GPU is the server's own (others hold {gib(foreign)})"
    return None


# -- the weights ----------------------------------------------------------------------------------

def _weights_why(f: Facts, s: Sizing | None, w: float) -> str:
    est = " (estimated from the model's size)" if f.weights_gib is None else ""
    ranks = (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1)
    return f"weights {gib(w)} per GPU{est} at TP x PP = {ranks}"


@condition("weights_exceed_gpu")
def _weights_gpu(f: Facts, s: Sizing | None) -> str | None:
    w, total = _weights(f, s), _total(f, s)
    if w is None or not total or w <= total * 0.95:
        return None
    return f"{_weights_why(f, s, w)} against one GPU's {gib(total)}: they cannot load"


@condition("weights_cannot_load")
def _cannot_load(f: Facts, s: Sizing | None) -> str | None:
    """The weights per GPU exceed it, as far as the paste shows the split: with several GPUs
    and no TP size shown, the server may well have been sharded."""
    if f.tensor_parallel_size is None and (_gpu_count(f) or 1) > 1:
        return None
    return _weights_gpu(f, s)


@condition("weights_exceed_one_gpu_unsharded")
def _weights_unsharded(f: Facts, s: Sizing | None) -> str | None:
    if (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1) > 1:
        return None
    why = _weights_gpu(f, s)
    tp = figures(s).suggested_tensor_parallel_size
    if why and isinstance(tp, int) and tp > 1:
        why += f"; TP {tp} is the smallest that fits and divides the heads"
    return why


@condition("weights_fill_one_gpu_unsharded")
def _weights_fill_unsharded(f: Facts, s: Sizing | None) -> str | None:
    """Unsharded weights that take 90% or more of the GPU: whatever the memory setting, the
    KV cache, activations and the CUDA context share the last few GiB, so the model needs
    more GPUs (or fewer bytes per parameter), not a different budget."""
    if (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1) > 1:
        return None
    w, total = _weights(f, s), _total(f, s)
    if w is None or not total or w < 0.9 * total or _weights_gpu(f, s):
        return None
    return (f"{_weights_why(f, s, w)} take {w / total:.0%} of one GPU's {gib(total)}: "
            "too little is left for the KV cache and activations on one GPU")


@condition("weights_exceed_common_gpu")
def _weights_no_gpu(f: Facts, s: Sizing | None) -> str | None:
    """The GPU is not named, but the weights at this TP are more than an 80 GB part holds
    (a 72B model in bf16 is ~134 GiB): it takes a 141 GB-class GPU, or more ranks. Even if
    they loaded (on such a GPU), they leave the KV pool little: more ranks is the fix."""
    if _total(f, s) or (_gpu_count(f) or 1) > 1:
        return None
    if (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1) > 1:
        return None
    w = _weights(f, s)
    if w is None or w <= COMMON_GPU_GIB:
        return None
    return (f"{_weights_why(f, s, w)}: more than an 80 GB GPU holds; it needs a larger "
            "GPU (H200, B200, MI300X) or a higher TP")


@condition("weights_fill_budget")
def _weights_fill(f: Facts, s: Sizing | None) -> str | None:
    return _budget_share(f, s, 0.9)


@condition("weights_dominate_budget")
def _weights_dominate(f: Facts, s: Sizing | None) -> str | None:
    return _budget_share(f, s, 0.7)


@condition("weights_small_in_budget")
def _weights_small(f: Facts, s: Sizing | None) -> str | None:
    w, budget = _weights(f, s), _budget(f, s)
    if w is None or not budget or w >= 0.5 * budget:
        return None
    return f"weights {gib(w)} use only {w / budget:.0%} of the {gib(budget)} budget"


def _budget(f: Facts, s: Sizing | None) -> float | None:
    return f.budget_gib if f.budget_gib is not None else (s.budget_gib if s else None)


def _budget_share(f: Facts, s: Sizing | None, at_least: float) -> str | None:
    budget = _budget(f, s)
    if not budget:
        return None
    w = _weights(f, s)
    non_kv = figures(s).non_kv_gib
    if non_kv is not None and s is not None and s.basis == "log":
        # budget - available: exact when the log printed the KV figure, and it includes the
        # activation and non-torch terms, so it beats a catalog estimate of the weights.
        used = float(non_kv)
        what = f"weights {gib(w)} + activation + non-torch" if w is not None else (
            "weights + activation + non-torch")
    elif w is not None:
        used, what = w, f"weights {gib(w)}" + (" (estimated)" if f.weights_gib is None else "")
    else:
        return None
    share = used / budget
    if share < at_least:
        return None
    return f"{what} take {gib(used)} of the {gib(budget)} budget ({share:.0%})"


@condition("full_precision_fp32")
def _fp32(f: Facts, s: Sizing | None) -> str | None:
    if (f.dtype or "") in ("float", "float32", "fp32"):
        return f"--dtype {f.dtype} loads the weights at 4 bytes per parameter, twice bf16"
    return None


@condition("spare_gpus")
def _spare(f: Facts, s: Sizing | None) -> str | None:
    count, used = _gpu_count(f), (f.tensor_parallel_size or 1) * (f.pipeline_parallel_size or 1)
    if count is not None and count > used:
        return f"the host shows {count} GPUs and TP x PP uses {used}"
    return None


# -- the KV cache -----------------------------------------------------------------------------

@condition("kv_needed_exceeds_available")
def _kv_needed(f: Facts, s: Sizing | None) -> str | None:
    if s is None:
        return None
    avail, needed = s.kv_cache_available_gib, s.kv_cache_needed_gib
    fit, length = s.max_model_len_that_fits, figures(s).target_max_model_len
    if avail is not None and avail <= 0:
        return None
    if needed is not None and avail is not None:
        if needed <= avail:
            return None
        why = (f"one request at max-model-len {length} needs {gib(needed)} of KV cache, "
               f"more than the {gib(avail)} available")
        return why + (f"; the largest that fits is {fit}" if fit else "")
    if fit and length and length > fit:
        asked = "" if f.max_model_len else " (the model's full context, as no flag set it)"
        return f"max-model-len {length}{asked} exceeds the largest that fits, {fit}"
    return None


def _no_kv_at_all(f: Facts, s: Sizing | None) -> str | None:
    """"no KV memory at all (X available, N blocks)" when not one block fits, else None."""
    avail = s.kv_cache_available_gib if s else f.kv_cache_available_gib
    blocks = f.gpu_blocks if f.gpu_blocks is not None else figures(s).num_gpu_blocks
    if (avail is not None and avail <= 0) or blocks == 0:
        return f"no KV memory at all ({gib(avail or 0.0)} available, {blocks or 0} blocks)"
    return None


@condition("no_kv_memory")
def _no_kv(f: Facts, s: Sizing | None) -> str | None:
    why = _no_kv_at_all(f, s)
    return why and (f"{why}: the budget is gone before the KV cache, so a shorter context "
                    "cannot help")


@condition("max_model_len_fits")
def _len_fits(f: Facts, s: Sizing | None) -> str | None:
    if s is None:
        return None
    fit, length = s.max_model_len_that_fits, figures(s).target_max_model_len
    if fit and length and length <= fit:
        return f"one request at max-model-len {length} fits (up to {fit})"
    return None


@condition("fp8_kv_would_fit")
def _fp8_fits(f: Facts, s: Sizing | None) -> str | None:
    if (f.kv_cache_dtype or "").startswith("fp8"):
        return None
    fp8_fit, length = figures(s).fp8_max_model_len, figures(s).target_max_model_len
    fit = s.max_model_len_that_fits if s else None
    if fp8_fit and length and fit is not None and fit < length <= fp8_fit:
        return (f"with --kv-cache-dtype fp8 one request at {length} fits (largest {fp8_fit}, "
                f"now {fit})")
    return None


@condition("kv_pressure")
def _pressure(f: Facts, s: Sizing | None) -> str | None:
    usage, pre, waiting = f.gpu_kv_cache_usage_pct, f.preemptions, f.waiting_requests
    if not ((usage is not None and usage >= 90) or pre):
        return None
    parts = []
    if usage is not None:
        parts.append(f"KV cache usage {usage:.1f}%")
    if pre:
        parts.append(f"{pre} preemptions")
    if waiting:
        parts.append(f"{waiting} requests waiting")
    return ", ".join(parts)


@condition("kv_usage_low")
def _usage_low(f: Facts, s: Sizing | None) -> str | None:
    usage = f.gpu_kv_cache_usage_pct
    if usage is not None and usage < 50 and not f.preemptions:
        return f"KV cache usage peaks at {usage:.1f}%: the pool is not the limit"
    return None


# -- utilization and headroom ---------------------------------------------------------------

@condition("utilization_low")
def _util_low(f: Facts, s: Sizing | None) -> str | None:
    util = f.gpu_memory_utilization if f.gpu_memory_utilization is not None else (
        f.mem_fraction_static)
    if util is None or util >= 0.9:
        return None
    return f"gpu_memory_utilization is set to {util:g}, below the 0.90-0.95 a dedicated GPU takes"


@condition("utilization_would_fit")
def _util_fits(f: Facts, s: Sizing | None) -> str | None:
    util, need = _util(f, s), figures(s).utilization_needed
    if util is None or need is None or not util < need <= 0.95:
        return None
    return f"utilization {need:.3f} (from {util:.2f}) would make one request at max-model-len fit"


@condition("trainer_pool_large")
def _trainer_pool(f: Facts, s: Sizing | None) -> str | None:
    """A rollout engine next to its trainer: half the GPU or more for the engine's pool leaves
    the trainer's model, gradients and optimizer too little."""
    util = _util(f, s)
    if not f.trainer_on_gpu or util is None or util < 0.5:
        return None
    return (f"utilization {util:g} gives the engine {util:.0%} of the GPU while the trainer "
            "beside it needs the rest")


# lmdeploy's KV cache takes this share of the memory left after the weights unless
# --cache-max-entry-count says otherwise (0.8 since v0.2.1).
LMDEPLOY_DEFAULT_POOL = 0.8


@condition("lmdeploy_default_pool")
def _lmdeploy_pool(f: Facts, s: Sizing | None) -> str | None:
    if f.engine != "lmdeploy" or f.cache_max_entry_count is not None:
        return None
    return (f"lmdeploy's default cache_max_entry_count {LMDEPLOY_DEFAULT_POOL:g} gives the KV "
            f"cache {LMDEPLOY_DEFAULT_POOL:.0%} of the memory left after the weights")


@condition("utilization_high")
def _util_high(f: Facts, s: Sizing | None) -> str | None:
    share = f.cache_max_entry_count
    if f.gpu_memory_utilization is None and share is not None and share >= 0.9:
        # lmdeploy's share is of the memory free after the weights: at 0.9 and above the
        # PyTorch side (vision encoder, sampling, activations) keeps a sliver of it
        return (f"cache_max_entry_count {share:g} gives the KV cache {share:.0%} of the memory "
                "left after the weights: almost nothing is left for activations and the "
                "vision encoder")
    util = f.gpu_memory_utilization if f.gpu_memory_utilization is not None else (
        f.mem_fraction_static)
    if util is None or util < 0.95:
        return None
    return (f"utilization {util:g} hands the pool nearly the whole GPU: nothing is left for "
            "activations, CUDA graphs and the allocator's slack outside it")


# -- activations, graphs, warm-up ---------------------------------------------------------------

@condition("activation_peak_large")
def _activation(f: Facts, s: Sizing | None) -> str | None:
    act, budget = f.activation_peak_gib, _budget(f, s)
    if act is None or not budget or not (act >= 0.1 * budget or act >= 4):
        return None
    mnbt = f.max_num_batched_tokens
    return (f"activation peak {gib(act)} ({act / budget:.0%} of the {gib(budget)} budget"
            + (f", max_num_batched_tokens {mnbt})" if mnbt else ")"))


@condition("large_batched_tokens")
def _mnbt(f: Facts, s: Sizing | None) -> str | None:
    mnbt = f.max_num_batched_tokens or f.max_batch_prefill_tokens
    if mnbt is None or mnbt < 16384:
        return None
    return f"{mnbt} tokens per batch set the size of the profiled (and served) prefill"


@condition("chunked_prefill_off_long_context")
def _no_chunking(f: Facts, s: Sizing | None) -> str | None:
    if f.enable_chunked_prefill is False and f.max_model_len and f.max_model_len >= 32768:
        return (f"chunked prefill off: one prefill can be max-model-len ({f.max_model_len}) "
                "tokens")
    return None


@condition("multimodal_model")
def _multimodal(f: Facts, s: Sizing | None) -> str | None:
    name = (f.model or "").lower()
    if any(k in name for k in ("-vl", "vision", "omni", "minicpm-v", "llava", "pixtral",
                               "qwen2vl", "internvl", "olmocr", "ocr", "-v-")):
        return (f"{f.model} profiles a maximum-size image batch through its vision encoder at "
                "start-up, on top of the text prefill")
    return None


@condition("in_cuda_graph_capture")
def _in_capture(f: Facts, s: Sizing | None) -> str | None:
    if f.phase != "cuda-graph":
        return None
    graphs = f" (graphs took {gib(f.cuda_graph_gib)})" if f.cuda_graph_gib else ""
    return f"it failed while capturing CUDA graphs{graphs}"


@condition("cuda_graph_large")
def _graphs(f: Facts, s: Sizing | None) -> str | None:
    graphs, headroom = f.cuda_graph_gib, figures(s).headroom_gib
    if graphs is None:
        return None
    if graphs >= 1.0 or (headroom is not None and graphs >= float(headroom) * 0.5):
        left = f" against {gib(float(headroom))} left outside the budget" if headroom else ""
        return f"CUDA graphs take {gib(graphs)}{left}"
    return None


# CUDA graphs usually take 0.3-3 GiB per GPU; an estimate several times that (a large MoE with
# many capture sizes, or a pessimistic profiler) is itself what left the KV cache no room.
GRAPHS_ABNORMAL_GIB = 8.0


@condition("cuda_graph_abnormal")
def _graphs_abnormal(f: Facts, s: Sizing | None) -> str | None:
    graphs = f.cuda_graph_gib
    if graphs is None or graphs < GRAPHS_ABNORMAL_GIB:
        return None
    return f"CUDA graphs are estimated at {gib(graphs)}, several times the usual 1-3 GiB per GPU"


@condition("in_sampler_warmup")
def _in_warmup(f: Facts, s: Sizing | None) -> str | None:
    if f.phase != "warmup" or f.engine not in (None, "vllm"):
        return None
    seqs = f" with max_num_seqs {f.max_num_seqs} dummy requests" if f.max_num_seqs else ""
    return f"it failed in the warm-up after the KV cache was allocated{seqs}"


@condition("tgi_warmup_prefill")
def _tgi_warmup(f: Facts, s: Sizing | None) -> str | None:
    """TGI's warm-up runs one prefill of --max-batch-prefill-tokens: its activations are the
    peak that does not fit."""
    if f.engine != "tgi" or f.phase != "warmup":
        return None
    tokens = f.max_batch_prefill_tokens
    what = f"{tokens} prefill tokens" if tokens else "--max-batch-prefill-tokens prefill tokens"
    return f"TGI's warm-up runs one batch of {what}; its activations did not fit"


@condition("max_num_seqs_large")
def _seqs(f: Facts, s: Sizing | None) -> str | None:
    if f.max_num_seqs is not None and f.max_num_seqs >= 512:
        return f"max_num_seqs {f.max_num_seqs} dummy requests in the sampler warm-up"
    return None


def _withhold_raise(f: Facts, s: Sizing | None) -> str | None:
    return _foreign_holds(f, s) or _weights_over_safe(f, s)


@condition("foreign_process_holds_memory")
def _foreign_holds(f: Facts, s: Sizing | None) -> str | None:
    foreign = _foreign(f, s)
    if foreign is not None and foreign > FOREIGN_MIN_GIB:
        who = foreign_processes_h(f)
        return (f"other processes hold {gib(foreign)}" + (f" ({who})" if who else "")
                + ": raising utilization cannot use memory they hold")
    failed = _free_check(f, s)
    return f"{failed}: raising utilization makes the start-up check fail harder" if failed else None


@condition("weights_exceed_budget_at_safe_max")
def _weights_over_safe(f: Facts, s: Sizing | None) -> str | None:
    w, total = _weights(f, s), _total(f, s)
    if w is None or not total or w <= total * 0.95:
        return None
    est = ", estimated" if f.weights_gib is None else ""
    return (f"weights alone ({gib(w)}{est}) exceed 0.95 x {gib(total)} = "
            f"{gib(total * 0.95)}: no safe utilization leaves room for the KV cache")


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
    need = figures(s).utilization_needed
    if need is not None and need > 0.95:
        return (f"the KV need calls for utilization {need:.3f}, above the safe 0.95: raising it "
                "alone cannot make one request fit")
    needed = f.kv_cache_needed_gib if f.kv_cache_needed_gib is not None else (
        s.kv_cache_needed_gib if s else None)
    avail = f.kv_cache_available_gib if f.kv_cache_available_gib is not None else (
        s.kv_cache_available_gib if s else None)
    if needed is None or avail is None or needed <= avail:
        return None
    cur = _util(f, s) or DEFAULT_UTIL
    total = _total(f, s)
    gain = max(0.0, 0.95 - cur) * (total or LARGEST_GPU_GIB)
    if needed - avail > gain:
        on = "" if total else f" even on a {LARGEST_GPU_GIB:.0f} GiB GPU"
        return (f"one request needs {gib(needed - avail)} more KV cache; raising utilization "
                f"from {cur:g} to 0.95 adds at most {gib(gain)}{on}")
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
    want = figures(s).suggested_tensor_parallel_size
    if count is not None and isinstance(want, int) and count >= want:
        return f"not needed: this host already has {count} GPUs"
    return None


@condition("kv_cache_already_fp8")
def _already_fp8(f: Facts, s: Sizing | None) -> str | None:
    kv = f.kv_cache_dtype or ""
    return f"the KV cache is already {kv}" if kv.startswith("fp8") else None


@condition("already_quantized")
def _already_quantized(f: Facts, s: Sizing | None) -> str | None:
    q = f.quantization or figures(s).model_quantization
    return f"the weights are already quantized ({q})" if q else None


@condition("nothing_fits")
def _nothing_fits(f: Facts, s: Sizing | None) -> str | None:
    why = _no_kv_at_all(f, s)
    return why and f"{why}: a shorter max-model-len cannot help"


@condition("already_eager")
def _eager(f: Facts, s: Sizing | None) -> str | None:
    return "--enforce-eager is already set" if f.enforce_eager else None


# -- what the log's own figures show, with or without an error line ---------------------------

DEFAULT_BLOCK_SIZE = 16  # vLLM's KV block size when the log does not print another
AMPLE_FREE_GIB = 1.0  # an OOM with at least this much free, and ...
AMPLE_FREE_RATIO = 10.0  # ... ten times the allocation free, is not a lack of memory
AMPLE_FREE_SHARE = 0.2  # ... nor when a fifth of the GPU is still free


@condition("oom_not_a_shortage")
def _oom_not_a_shortage(f: Facts, s: Sizing | None) -> str | None:
    """A CUDA OOM for a few MiB while most of the GPU is free: the allocator failed for
    another reason (vLLM sleep mode's cumem allocator, a driver, MIG or MPS limit)."""
    free, tried, total = f.oom_free_gib, f.oom_tried_to_allocate_gib, _total(f, s)
    if free is None or tried is None or free < AMPLE_FREE_GIB or free < AMPLE_FREE_RATIO * tried:
        return None
    if total and free < AMPLE_FREE_SHARE * total:
        return None
    of_total = f" of {gib(total)}" if total else ""
    return (f"CUDA refused {gib(tried)} while {gib(free)}{of_total} was free: that is not a "
            "shortage of GPU memory but an allocation that failed for another reason (vLLM's "
            "sleep-mode cumem allocator, the driver, a MIG or MPS limit); the error printed "
            "before it says which")


@condition("kv_tokens_below_max_model_len")
def _kv_tokens_short(f: Facts, s: Sizing | None) -> str | None:
    """The KV cache the log sized holds fewer tokens than one max_model_len request: vLLM
    refuses to start (V0 and V1 alike), whether or not the paste kept the error line."""
    length = f.max_model_len
    tokens, how = f.kv_cache_tokens, ""
    if tokens is None and f.gpu_blocks:
        block = f.block_size or DEFAULT_BLOCK_SIZE
        tokens, how = f.gpu_blocks * block, f" ({f.gpu_blocks:,} blocks of {block})"
    if not length or not tokens or tokens <= 0 or tokens >= length:
        return None
    return (f"the KV cache holds {tokens:,} tokens{how}, fewer than one request at "
            f"max_model_len {length:,}")


@condition("bf16_on_pre_ampere")
def _bf16_old_gpu(f: Facts, s: Sizing | None) -> str | None:
    """bfloat16 asked of a GPU below compute capability 8.0 (V100, T4, Pascal)."""
    if (f.dtype or "").lower() not in ("bfloat16", "bf16"):
        return None
    cc, name = _compute_capability(f)
    if cc is None or cc >= 8.0:
        return None
    return f"dtype bfloat16 on {name or 'a GPU'} (compute capability {cc:.1f}; bf16 needs 8.0)"


def _compute_capability(f: Facts) -> tuple[float | None, str | None]:
    """The GPU's compute capability: as the log or nvidia-smi printed it, else the catalog's
    for the GPU the paste names."""
    name = f.gpu_name or next((g.name for g in f.gpus if g.name), None)
    text = f.compute_capability
    if text is None and name:
        try:
            text = resolve_gpu(name).compute_capability
        except UnknownName:
            return None, name
    try:
        return (float(text) if text else None), name
    except ValueError:  # an AMD architecture name such as gfx942
        return None, name


@condition("gpu_below_volta")
def _below_volta(f: Facts, s: Sizing | None) -> str | None:
    """A Pascal or older GPU (compute capability below 7.0): current builds ship no kernels
    for it, so 'no kernel image' there is the GPU's age, not a build to reinstall."""
    cc, name = _compute_capability(f)
    if cc is None or cc >= 7.0:
        return None
    return f"{name or 'the GPU'} has compute capability {cc:.1f}; current builds start at 7.0"


TINY_CONTEXT = 4096  # tokens: a KV cache that holds less serves no real request


@condition("kv_fits_only_a_tiny_context")
def _tiny_fit(f: Facts, s: Sizing | None) -> str | None:
    """The KV cache left beside the weights holds a few hundred tokens of a long context: a
    shorter --max-model-len 'fits' but serves nothing; what takes the budget is the cause."""
    fit = f.estimated_max_model_len or (s.max_model_len_that_fits if s else None)
    want = f.max_model_len or figures(s).target_max_model_len
    if not fit or not want or fit >= TINY_CONTEXT or want <= fit:
        return None
    if fit * 8 > want and want > TINY_CONTEXT:
        return None  # a long context that fits in part: the length is the lever
    return (f"only {fit:,} tokens of KV cache fit where max_model_len asks {want:,}: the "
            "budget is spent before the KV cache, so a shorter context is no real fix")


@condition("kv_cache_short")
def _kv_short(f: Facts, s: Sizing | None) -> str | None:
    """The KV cache is already too small for one request: handing the engine less of the GPU
    would shrink it further."""
    why = _no_kv_at_all(f, s) or _kv_tokens_short(f, s)
    avail, needed = f.kv_cache_available_gib, f.kv_cache_needed_gib
    if why is None and avail is not None and needed is not None and needed > avail:
        why = f"one request needs {gib(needed)} of KV cache and {gib(avail)} is available"
    return why and f"{why}: a smaller memory fraction would leave even less KV cache"
