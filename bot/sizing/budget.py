"""The memory budget of one GPU rank, and what each knob would change, as a `Sizing`.

The budget is taken from the best source available, in this order (vllm-memory.md 1, 4, 8):

1. "log": the server's own numbers ("Available KV cache memory", V0's kv_cache_size, blocks,
   "GPU KV cache size", the printed estimate). vLLM's arithmetic already ran; we reuse it and
   only check our geometry agrees.
2. "host": total x utilization - weights - activation peak - non-torch, from the host's GPU
   total (nvidia-smi / the log) and whatever profile terms the evidence shows.
3. "catalog": the same formula from the GPU catalog's memory and the model's parameter count.

Terms the evidence lacks are estimated with the rules of thumb below and the result is marked
`is_estimate`; the notes say which term was estimated and why, so an answer never passes off a
guess as a measurement.
"""

from __future__ import annotations

import math
from dataclasses import field

from bot.lazyre import lazy
from bot.schema import GIB, MIB, Facts, Sizing, SizingFigures
from bot.sizing.catalog import (
    GpuSpec,
    ModelSpec,
    ResolvedModel,
    UnknownName,
    resolve_gpu,
    resolve_model,
)
from bot.sizing.kv import DEFAULT_BLOCK, KvLayout, cdiv, head_size, kv_heads_per_rank
from bot.structs import struct

SAFE_MIN_UTIL = 0.90  # the safe range for a GPU the server has to itself
SAFE_MAX_UTIL = 0.95
DEFAULT_UTIL = 0.9  # CacheConfig.gpu_memory_utilization
# The most of one GPU the weights may take and still leave the KV cache a useful share.
WEIGHTS_SHARE = 0.75
LOG_PRINT_WINDOW_GIB = 0.005  # a value printed as X.XX GiB
REDUNDANCY_BUFFER_GIB = 150 * MIB / GIB  # vLLM's --kv-cache-memory suggestion margin

# Bytes per parameter by weight format. 4-bit AWQ/GPTQ carry group scales/zeros and keep the
# embeddings and lm_head in 16 bit, which averages to about 0.56 B/param on 7B-70B models;
# FP8/INT8 checkpoints keep a few tensors in 16 bit (~2 %).
BYTES_PER_PARAM = {"32bit": 4.0, "16bit": 2.0, "8bit": 1.02, "4bit": 0.5625}
_FOUR_BIT = ("awq", "gptq", "bnb-4bit", "bitsandbytes", "nvfp4", "mxfp4", "marlin", "exl2",
             "gguf", "4bit", "int4", "w4a16")
_EIGHT_BIT = ("fp8", "int8", "w8a8", "8bit", "compressed-tensors", "modelopt")
_FULL = ("float", "float32", "fp32")  # --dtype float: 4 bytes per parameter
# exllama's bits per weight ("2.4bpw", "4.65bpw"): rounded up to the next format above
_BPW = lazy(r"(\d{1,2}(?:\.\d{1,2})?) ?bpw")
# The size stands apart ("Qwen2-7B") or right after a lower-case name ("baichuan13b",
# "chatglm6b"), never after a digit or a dot ("v1.5b" is no size).
_SIZE_IN_NAME = lazy(r"(?:(?<![A-Za-z0-9.])|(?<=[a-z]{3}))(?:(?P<experts>\d{1,3})x)?"
                     r"(?P<n>\d{1,4}(?:\.\d{1,2})?)(?P<u>[bBmM])(?![A-Za-z0-9])")

# Rules of thumb for the profile terms when the log does not show them (catalog estimates):
# the dummy forward holds ~16 hidden-sized bf16 vectors per batched token (MLP intermediate,
# QKV, residuals) split over TP, plus the sampler warm-up's float32 logits (x2 for softmax)
# for min(max_num_seqs, tokens) rows. Non-torch (CUDA context share, cuBLAS, NCCL) ~0.25 GiB,
# +0.5 GiB for NCCL buffers once there is more than one rank.
ACTIVATION_VECTORS_PER_TOKEN = 16
NON_TORCH_GIB = 0.25
NCCL_GIB = 0.5
DEFAULT_VOCAB = 128_000


def quantization_in_name(name: str | None) -> str | None:
    """The weight format a model's name states ("Qwen3.6-35B-A3B-NVFP4", "Llama-3-70B-AWQ"),
    for a model the catalog does not know; None when it states none."""
    lowered = (name or "").rsplit("/", 1)[-1].lower()
    if (bpw := _BPW.search(lowered)) is not None:
        return bpw.group(0)
    return next((k for k in (*_FOUR_BIT, *_EIGHT_BIT) if k in lowered), None)


def weight_format(quantization: str | None, dtype: str | None = None) -> str:
    """'32bit' / '16bit' / '8bit' / '4bit' for a --quantization value or a dtype."""
    q = (quantization or dtype or "").lower()
    if (bpw := _BPW.search(q)) is not None:
        bits = float(bpw.group(1))
        return "4bit" if bits <= 4.5 else "8bit" if bits <= 8.5 else "16bit"
    if any(k in q for k in _FOUR_BIT):
        return "4bit"
    if any(k in q for k in _EIGHT_BIT):
        return "8bit"
    if q in _FULL:
        return "32bit"
    return "16bit"


def params_from_name(name: str | None) -> float | None:
    """The parameter count a model's name states ("Qwen2-7B-Instruct", "llama-2-13b-chat",
    "opt-125m", "Mixtral-8x7B"), for a model the catalog does not know. An MoE's active size
    ("30B-A3B") is not its total."""
    if not name:
        return None
    best: float | None = None
    for m in _SIZE_IN_NAME.finditer(name.rsplit("/", 1)[-1]):
        n = float(m.group("n")) * (1e9 if m.group("u") in "bB" else 1e6)
        if m.group("experts"):
            n *= int(m.group("experts"))
        best = n if best is None else max(best, n)
    return best


def estimate_weights_gib(params: float, fmt: str, shards: int = 1) -> float:
    return params * BYTES_PER_PARAM[fmt] / shards / GIB


def default_max_num_batched_tokens(total_gib: float | None, gpu_name: str | None) -> int:
    """V1 OpenAI-server default (vllm-memory.md 5): 8192 on >= 70 GiB non-A100 GPUs, else 2048."""
    big = total_gib is not None and total_gib >= 70 and "a100" not in (gpu_name or "").lower()
    return 8192 if big else 2048


def default_max_num_seqs(total_gib: float | None, gpu_name: str | None) -> int:
    big = total_gib is not None and total_gib >= 70 and "a100" not in (gpu_name or "").lower()
    return 1024 if big else 256


def fmt_bytes(n: float) -> str:
    """'128 KiB', '2 MiB', '48 KiB' (binary units, as the KV arithmetic is binary)."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n:.0f} B"


@struct
class Inputs:
    """The resolved deployment: what the sizing is about, with defaults made explicit."""

    facts: Facts
    model: ResolvedModel | None
    gpu: GpuSpec | None
    layout: KvLayout | None
    tp: int
    pp: int
    block: int
    util: float | None
    v0: bool
    notes: list[str] = field(default_factory=list)


@struct(frozen=True, slots=True)
class ModelLookup:
    """The model a diagnosis is about, looked up once (its config.json first, else its name):
    the catalog's entry, or the note saying why there is none."""

    model: ResolvedModel | None = None
    unknown: str | None = None


def look_up_model(facts: Facts, model_config: dict[str, object] | None = None) -> ModelLookup:
    try:
        if model_config:
            return ModelLookup(resolve_model(dict(model_config)))
        if facts.model:
            return ModelLookup(resolve_model(facts.model))
    except UnknownName as exc:
        named = facts.model_named
        if named and named != facts.model:
            try:
                return ModelLookup(resolve_model(named))
            except UnknownName:
                pass
        return ModelLookup(unknown=f"model geometry unknown: {exc}")
    return ModelLookup()


def resolve_inputs(facts: Facts, lookup: ModelLookup | None = None) -> Inputs:
    """Model (looked up, else from the facts), GPU and layout; unknowns become notes."""
    lookup = lookup if lookup is not None else look_up_model(facts)
    model = lookup.model
    notes: list[str] = [lookup.unknown] if lookup.unknown else []
    gpu: GpuSpec | None = None
    gpu_name = facts.gpu_name or next((g.name for g in facts.gpus if g.name), None)
    if gpu_name:
        try:
            gpu = resolve_gpu(gpu_name)
        except UnknownName as exc:
            notes.append(str(exc))
    tp = facts.tensor_parallel_size or 1
    pp = facts.pipeline_parallel_size or 1
    block = facts.block_size or DEFAULT_BLOCK
    v0 = facts.engine_generation == "V0"
    util = facts.gpu_memory_utilization
    if util is None and facts.engine == "sglang":
        util = facts.mem_fraction_static
    layout = None
    if model is not None:
        layout = KvLayout.build(model.spec, tp, pp, facts.kv_cache_dtype, block, hybrid=not v0)
        if model.spec.sliding_layers and v0:
            notes.append("V0 sizes sliding-window layers as full attention")
    return Inputs(facts, model, gpu, layout, tp, pp, block, util, v0, notes)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def compute_sizing(facts: Facts, lookup: ModelLookup | None = None) -> Sizing:
    """The budget and every derived result for one rank; see the module docstring. `lookup`
    is the model already looked up (by default, from the facts' model name)."""
    return Budget(resolve_inputs(facts, lookup)).sizing()


class Budget:
    """Works out each term once, recording where it came from."""

    def __init__(self, inp: Inputs) -> None:
        self.inp = inp
        self.f = inp.facts
        self.notes = list(inp.notes)
        self.estimated: list[str] = []
        self.geometry_agrees = True  # False when vLLM's printed estimate contradicts ours
        self.total, self.total_src = self._total()
        self.util = inp.util
        if self.util is None and self.f.engine in (None, "vllm"):
            self.util = DEFAULT_UTIL
            self.notes.append("gpu_memory_utilization not shown: vLLM's default 0.9 assumed")
        self.weight_fmt = weight_format(
            self.f.quantization or (inp.model.quantization if inp.model
                                    else quantization_in_name(self.f.model)
                                    or quantization_in_name(self.f.model_named)),
            (inp.model.weight_dtype if inp.model else None) or self.f.dtype)
        self.weights = self._weights()
        self.mnbt = self.f.max_num_batched_tokens
        self.activation = self._activation()
        self.non_torch = self._non_torch()
        self.budget = self.f.budget_gib or self.f.requested_memory_gib or (
            self.total * self.util if self.total is not None and self.util is not None else None)
        self.available, self.basis = self._available()
        if self._weights_contradicted():
            self.notes.append(
                f"the estimated weights ({self.weights:.2f} GiB) would leave no KV cache, but "
                "the log shows one: they are not this model's (or not at this TP), so they are "
                "left out")
            self.estimated.remove("weights")
            self.weights = None
            self.available, self.basis = self._available()
        self.foreign = self._foreign()
        self.free = self.f.free_memory_gib
        if self.free is None and self.f.gpus and self.f.gpus[0].free_mib is not None:
            self.free = self.f.gpus[0].free_mib / 1024

    # -- the terms ---------------------------------------------------------------------------

    def _total(self) -> tuple[float | None, str]:
        if self.f.gpu_total_gib is not None:
            return self.f.gpu_total_gib, "host"
        if self.f.gpus and self.f.gpus[0].total_mib:
            return self.f.gpus[0].total_mib / 1024, "host"
        if self.inp.gpu is not None:
            self.estimated.append("GPU total")
            self.notes.append(f"GPU total from the catalog ({self.inp.gpu.name}, "
                              f"{self.inp.gpu.memory_mib:.0f} MiB as nvidia-smi reports it)")
            return self.inp.gpu.memory_gib, "catalog"
        return None, ""

    def _weights(self) -> float | None:
        if self.f.weights_gib is not None:
            return self.f.weights_gib
        m = self.inp.model
        params = m.spec.params if m is not None else (
            params_from_name(self.f.model) or params_from_name(self.f.model_named))
        if params is None:
            return None
        self.estimated.append("weights")
        shards = self.inp.tp * self.inp.pp
        w = estimate_weights_gib(params, self.weight_fmt, shards)
        offload = f" - {self.f.cpu_offload_gb:g} GiB offloaded" if self.f.cpu_offload_gb else ""
        named = " (the size in its name)" if m is None else ""
        self.notes.append(f"weights estimated: {params / 1e9:.1f}B params{named} x "
                          f"{BYTES_PER_PARAM[self.weight_fmt]} B ({self.weight_fmt}) / {shards} "
                          f"rank(s){offload} = {w - (self.f.cpu_offload_gb or 0):.2f} GiB")
        return max(0.0, w - (self.f.cpu_offload_gb or 0.0))

    def _weights_contradicted(self) -> bool:
        """An estimate of the weights that leaves no KV cache, where the log shows the KV
        cache sized (blocks, tokens or vLLM's own fitting length): the server got past
        loading and profiling, so the weights fit; the estimate names another model (a
        sentence's "qwen-72b works" beside a failing Qwen1.5) or another TP."""
        f = self.f
        sized = max(f.gpu_blocks or 0, f.kv_cache_tokens or 0, f.estimated_max_model_len or 0)
        return ("weights" in self.estimated and self.available is not None
                and self.available <= 0 and sized > 0)

    def _activation(self) -> float | None:
        if self.f.activation_peak_gib is not None:
            return self.f.activation_peak_gib
        m = self.inp.model
        if m is None or self.f.kv_cache_available_gib is not None:
            return None  # with the log's own KV figure the term is already inside it
        mnbt = self.mnbt or default_max_num_batched_tokens(self.total, self.f.gpu_name)
        seqs = min(self.f.max_num_seqs or default_max_num_seqs(self.total, self.f.gpu_name),
                   mnbt)
        vocab = m.spec.vocab_size or DEFAULT_VOCAB
        act = (mnbt * m.spec.hidden_size * 2 * ACTIVATION_VECTORS_PER_TOKEN / self.inp.tp
               + seqs * vocab * 4 * 2) / GIB
        self.estimated.append("activation peak")
        self.notes.append(f"activation peak estimated at {act:.2f} GiB for "
                          f"max_num_batched_tokens {mnbt} (rule of thumb)")
        return act

    def _non_torch(self) -> float | None:
        if self.f.non_torch_gib is not None:
            return self.f.non_torch_gib
        if self.inp.model is None or self.f.kv_cache_available_gib is not None:
            return None
        self.estimated.append("non-torch")
        return NON_TORCH_GIB + (NCCL_GIB if self.inp.tp * self.inp.pp > 1 else 0.0)

    def _available(self) -> tuple[float | None, str]:
        if self.f.kv_cache_available_gib is not None:
            return self.f.kv_cache_available_gib, "log"
        if self.f.kv_cache_memory_bytes is not None:
            self.notes.append("--kv-cache-memory sets the KV pool; utilization is ignored")
            return self.f.kv_cache_memory_bytes / GIB, "log" if self.f.weights_gib else "host"
        if (self.budget is None or self.weights is None or self.activation is None
                or self.non_torch is None):
            return None, ""
        avail = self.budget - self.weights - self.activation - self.non_torch
        logged = self.f.weights_gib is not None and self.f.activation_peak_gib is not None
        basis = "log" if logged and self.f.budget_gib is not None else self.total_src or "catalog"
        return avail, basis

    def _foreign(self) -> float | None:
        if self.f.foreign_processes_gib is not None:
            return self.f.foreign_processes_gib
        others = [p for p in self.f.processes if p.is_server is False and p.used_mib]
        if not others:
            return None
        return sum(p.used_mib or 0 for p in others) / 1024

    # -- the results -------------------------------------------------------------------------

    @property
    def layout(self) -> KvLayout | None:
        return self.inp.layout

    @property
    def target_len(self) -> int | None:
        """The length the server was asked for (vLLM defaults to the model's maximum)."""
        if self.f.max_model_len:
            return self.f.max_model_len
        if self.inp.model and self.inp.model.spec.max_position_embeddings:
            return self.inp.model.spec.max_position_embeddings
        return None

    def bytes_per_token(self) -> float | None:
        """Exact from the geometry; else derived from the log's "X GiB needed at length L"."""
        if self.layout is not None:
            return float(self.layout.bytes_per_token)
        if self.f.kv_cache_needed_gib and self.f.max_model_len:
            rounded = cdiv(self.f.max_model_len, self.inp.block) * self.inp.block
            self.notes.append("KV bytes per token derived from the log's needed KV "
                              "(model geometry unknown; +-1 %)")
            return self.f.kv_cache_needed_gib * GIB / rounded
        return None

    def blocks(self, bpt: float | None) -> int | None:
        if self.f.gpu_blocks is not None:
            return self.f.gpu_blocks
        groups = self.layout.deciding.num_groups if self.layout else 1
        if self.f.kv_cache_tokens is not None:
            return self.f.kv_cache_tokens // self.inp.block * groups
        if self.f.estimated_max_model_len is not None and groups == 1:
            # vLLM's own estimate is blocks x block_size for full attention: stay consistent
            # with it even where our geometry disagrees (PP partitions, custom layers).
            return self.f.estimated_max_model_len // self.inp.block
        if self.available is None:
            return None
        if self.layout is not None:
            return self.layout.num_blocks(self.available * GIB)
        if bpt:
            return max(0, int(self.available * GIB // (bpt * self.inp.block)))
        return None

    def fit_len(self, blocks: int | None, bpt: float | None, available: float | None
                ) -> int | None:
        """Largest max-model-len whose one request fits, as vLLM's estimate_max_model_len."""
        if blocks is not None and self.layout is not None and available is None:
            return min(s.max_len(blocks * s.blocks_unit, self._mnbt())
                       for s in self.layout.stages)
        if available is not None and self.layout is not None:
            return self.layout.max_model_len(available * GIB, self._mnbt())
        if blocks is not None:
            return blocks * self.inp.block
        if available is not None and bpt:
            return int(available * GIB // (bpt * self.inp.block)) * self.inp.block
        return None

    def _mnbt(self) -> int:
        return self.mnbt or default_max_num_batched_tokens(self.total, self.f.gpu_name)

    def _cap(self, n: int | None) -> int | None:
        m = self.inp.model
        top = m.spec.max_position_embeddings if m else None
        return min(n, top) if n is not None and top else n

    def sizing(self) -> Sizing:
        f, lay, block = self.f, self.layout, self.inp.block
        bpt = self.bytes_per_token()
        blocks = self.blocks(bpt)
        # The log's blocks are exact; available bytes only to +-0.005 GiB, so prefer blocks.
        exact_blocks = f.gpu_blocks is not None or f.kv_cache_tokens is not None or (
            f.estimated_max_model_len is not None)
        fit = self.fit_len(blocks, bpt, None if exact_blocks else self.available)
        if f.estimated_max_model_len is not None:
            self._agree(f.estimated_max_model_len)
            fit = f.estimated_max_model_len
        else:
            fit = self._cap(fit)
        target = self.target_len
        needed = f.kv_cache_needed_gib
        if needed is None and lay is not None and target:
            needed = lay.needed_bytes(target, self._mnbt()) / GIB
        concurrency = f.max_concurrency
        if concurrency is None and blocks is not None and target:
            concurrency = (lay.concurrency(blocks, target, self._mnbt(), self.inp.v0) if lay
                           else blocks * block / target)
        kv_tokens = f.kv_cache_tokens
        if kv_tokens is None and blocks is not None:
            kv_tokens = lay.tokens(blocks) if lay else blocks * block
        util_needed = None
        if self.total and self.util is not None and needed is not None and (
                self.available is not None):
            util_needed = self.util + (needed - self.available) / self.total
        non_kv = (self.budget - self.available
                  if self.budget is not None and self.available is not None else None)
        figures = SizingFigures(
            gpu_total_gib=_r(self.total), gpu_memory_utilization=self.util,
            activation_gib=_r(self.activation), non_torch_gib=_r(self.non_torch),
            cuda_graph_gib=f.cuda_graph_gib, non_kv_gib=_r(non_kv),
            foreign_processes_gib=_r(self.foreign), free_memory_gib=_r(self.free),
            free_check_fails=self._free_check_fails(),
            num_gpu_blocks=blocks, kv_cache_tokens=kv_tokens,
            target_max_model_len=target, utilization_needed=_r(util_needed, 4),
            tensor_parallel_size=self.inp.tp, pipeline_parallel_size=self.inp.pp,
            pp_layers=[s.layers for s in lay.stages] if lay else None,
            kv_heads_per_rank=kv_heads_per_rank(lay.spec, lay.tp) if lay else None,
            head_size=head_size(lay.spec) if lay else None,
            weights_exceed_gpu=(self.weights > self.total
                                if self.weights is not None and self.total else None),
            weights_exceed_safe_budget=(self.weights > self.total * SAFE_MAX_UTIL
                                        if self.weights is not None and self.total else None),
            headroom_gib=_r(self._headroom()),
            model_id=self.inp.model.spec.id if self.inp.model else None,
            model_quantization=self.inp.model.quantization if self.inp.model else None,
            gpu_catalog_id=self.inp.gpu.id if self.inp.gpu else None,
        )
        self._what_ifs(figures, needed, fit, target)
        if self.estimated:
            self.notes.append("estimated terms: " + ", ".join(self.estimated))
        return Sizing(
            # An estimate when the KV figure rests on a catalog term or a derived geometry;
            # the log's own KV budget stays exact even if the weights were only estimated.
            is_estimate=(bool(self.estimated) and self.basis != "log") or (
                bpt is not None and lay is None),
            basis=self.basis or self.total_src,
            block_size=block,
            kv_bytes_per_token=round(bpt) if bpt is not None else None,
            kv_bytes_per_block=(lay.bytes_per_block if lay else
                                round(bpt * block) if bpt is not None else None),
            budget_gib=_r(self.budget), weights_gib=_r(self.weights, 4),
            kv_cache_available_gib=_r(self.available),
            kv_cache_needed_gib=_r(needed),
            max_model_len_that_fits=fit, max_concurrency=_r(concurrency, 2),
            notes=self.notes, extra=figures,
        )

    def _agree(self, logged: int) -> None:
        """Check our geometry reproduces the log's estimate within the print window."""
        if self.layout is None or self.available is None:
            return
        lo = self.layout.max_model_len((self.available - LOG_PRINT_WINDOW_GIB) * GIB, self._mnbt())
        hi = self.layout.max_model_len((self.available + LOG_PRINT_WINDOW_GIB) * GIB, self._mnbt())
        if not lo <= logged <= hi:
            self.geometry_agrees = False
            self.notes.append(f"vLLM's estimate {logged} is outside our range {lo}-{hi} for "
                              f"{self.available:.2f} GiB: model geometry or TP/PP may differ, "
                              "so the what-ifs scale vLLM's figures instead")

    def _free_check_fails(self) -> bool | None:
        """v0.9.1+: startup fails when free memory < total x utilization."""
        if self.free is None or self.total is None or self.util is None:
            return None
        return self.free < round(self.total * self.util, 2)

    def _headroom(self) -> float | None:
        """What is left of the GPU outside the budget, other processes and CUDA graphs."""
        if self.total is None or self.budget is None:
            return None
        return self.total - self.budget - (self.foreign or 0.0) - (self.f.cuda_graph_gib or 0.0)

    def _what_ifs(self, out: SizingFigures, needed: float | None, fit: int | None,
                  target: int | None) -> None:
        """What each knob would change; the planner's template values come from here."""
        lay = self.layout if self.geometry_agrees else None
        avail, f = self.available, self.f
        if lay is not None and lay.dtype_bytes > 1 and avail is not None:
            out.fp8_max_model_len = self._cap(
                lay.with_(kv_cache_dtype="fp8").max_model_len(avail * GIB, self._mnbt()))
        elif lay is None and fit is not None and not (f.kv_cache_dtype or "").startswith("fp8"):
            out.fp8_max_model_len = 2 * fit  # blocks double; exact within one block
        if self.weights is not None and self.weight_fmt != "4bit":
            q = self.weights * BYTES_PER_PARAM["4bit"] / BYTES_PER_PARAM[self.weight_fmt]
            out.quantized_weights_gib = _r(q)
            if avail is not None and lay is not None:
                out.quantized_max_model_len = self._cap(
                    lay.max_model_len((avail + self.weights - q) * GIB, self._mnbt()))
            if self.weight_fmt == "16bit":
                out.fp8_weights_gib = _r(self.weights * BYTES_PER_PARAM["8bit"] / 2)
        if lay is not None:
            self._tp_what_if(out, lay, target)
        if needed is not None and avail is not None and self.total is not None:
            non_kv = (self.budget - avail) if self.budget is not None else 0.0
            room = self.total * SAFE_MAX_UTIL - (self.foreign or 0.0) - non_kv
            give = min(needed, room - REDUNDANCY_BUFFER_GIB)
            if give > 0:
                out.kv_cache_memory_suggested_bytes = int(give * GIB) // MIB * MIB
            short = needed - avail
            if short > 0 and self.weights is not None and short < self.weights:
                out.cpu_offload_gb_suggested = math.ceil(short * 1.1)
        if self.activation is not None or self.mnbt is not None:
            mnbt = self._mnbt()
            new = max(512, mnbt // 2)
            if new < mnbt:
                out.suggested_max_num_batched_tokens = new
                if self.activation is not None:
                    out.activation_saving_gib = _r(self.activation * (1 - new / mnbt) * 0.8)
        # Half the running value; unknown, 128 is below every vLLM default (256 / 1024).
        out.suggested_max_num_seqs = max(16, f.max_num_seqs // 2) if f.max_num_seqs else 128

    def _tp_what_if(self, out: SizingFigures, lay: KvLayout, target: int | None) -> None:
        """The smallest larger TP size whose per-rank budget fits the target length."""
        avail, w = self.available, self.weights
        if w is None:
            return
        # Not limited by the host's GPU count: "TP 2 would fit" is worth saying even on a
        # one-GPU host; the planner's no_spare_gpus condition withholds it there, with why.
        limit = max(self.f.gpu_count or len(self.f.gpus), 8)
        if avail is None or not target:
            self._tp_for_weights(out, lay, w, limit)
            return
        for tp in tp_sizes(lay.spec, limit // lay.pp):
            if tp <= lay.tp:
                continue
            freed = (w + (self.activation or 0.0)) * (1 - lay.tp / tp)
            fit = self._cap(lay.with_(tp=tp).max_model_len((avail + freed) * GIB, self._mnbt()))
            out.suggested_tensor_parallel_size, out.tp_max_model_len = tp, fit
            if fit is not None and fit >= target:
                break

    def _tp_for_weights(self, out: SizingFigures, lay: KvLayout, w: float, limit: int) -> None:
        """With no KV budget to size against (no utilization or KV line shown), weights that
        fill one GPU: the smallest larger TP size whose share of the weights leaves a quarter
        of the GPU for the KV cache and activations."""
        if self.total is None or w <= self.total * WEIGHTS_SHARE:
            return
        for tp in tp_sizes(lay.spec, limit // lay.pp):
            if tp > lay.tp and w * lay.tp / tp <= self.total * WEIGHTS_SHARE:
                out.suggested_tensor_parallel_size = tp
                return


def tp_sizes(spec: ModelSpec, limit: int) -> list[int]:
    """TP sizes vLLM accepts for this model (divisors of the attention heads), up to limit."""
    return [t for t in range(1, max(1, limit) + 1) if spec.num_attention_heads % t == 0]
