"""`inferbot size`: three calculators in one answer, before any hardware is bought.

1. KV cache memory: per sequence, per batch, and how many sequences fit (the same arithmetic
   as a diagnosis: `bot.sizing.budget` from the catalogs, so the two never disagree).
2. Throughput: a roofline. One decode step must read every weight it uses plus the KV of every
   sequence in the batch (bounded by HBM bandwidth) and do ~2 FLOPs per active parameter per
   token (bounded by tensor throughput); the slower bound sets the step time.
3. Concurrent users: most connected users are reading, not generating. The memory limit is how
   many active sequences the KV pool holds; the throughput limit is how many can stream at a
   per-user rate; users = active limit / active share.

Everything is an estimate from spec sheets and the printed assumptions; the report says so.
This module is off the `inferbot diagnose` path, so it may use pydantic models for the JSON.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.schema import GIB, Facts, Sizing
from bot.sizing.budget import (
    BYTES_PER_PARAM,
    DEFAULT_UTIL,
    ModelLookup,
    compute_sizing,
    fmt_bytes,
    weight_format,
)
from bot.sizing.catalog import GpuSpec, ModelSpec, resolve_gpu, resolve_model
from bot.sizing.kv import DEFAULT_BLOCK, KvLayout, cdiv

DEFAULT_ACTIVE_SHARE = 0.10  # share of connected users generating at any moment
DEFAULT_USER_TOKENS_PER_S = 20.0  # a comfortable reading speed for a streamed answer
EFFICIENCY = 0.75  # share of peak bandwidth / FLOP/s a tuned server reaches in decode
DEFAULT_MAX_NUM_SEQS = 256


class SizeError(ValueError):
    """Bad `inferbot size` input (one line, suitable for stderr)."""


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Deployment(_Out):
    model: str
    model_quantization: str | None
    gpu: str
    gpu_memory_gib: float
    gpus: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    replicas: int = Field(description="data-parallel copies: gpus // (tp x pp)")
    max_model_len: int
    kv_cache_dtype: str
    gpu_memory_utilization: float


class KvMemory(_Out):
    """Calculator 1. Per-GPU figures are for one rank; a sequence's KV is spread over tp."""

    kv_bytes_per_token: int
    kv_bytes_per_block: int
    block_size: int
    kv_per_sequence_gib: float = Field(description="one max-model-len request, block-rounded")
    concurrency: int
    kv_per_batch_gib: float
    weights_gib: float
    activation_gib: float | None
    non_torch_gib: float | None
    budget_gib: float | None
    kv_available_gib: float | None
    sequences_fit: float | None = Field(description="max-model-len requests the pool holds")
    kv_cache_tokens: int | None
    max_model_len_that_fits: int | None
    batch_fits: bool | None
    fp8_max_model_len: int | None


class Throughput(_Out):
    """Calculator 2 (per replica)."""

    batch: int
    avg_context: int
    bytes_per_step_gib: float
    flops_per_step_t: float
    step_ms: float
    bound: Literal["memory", "compute"]
    tokens_per_s: float = Field(description="aggregate decode tokens/s of one replica")
    tokens_per_s_per_user: float
    single_stream_tokens_per_s: float


class Users(_Out):
    """Calculator 3."""

    active_share: float
    user_tokens_per_s: float
    active_by_memory: int
    active_by_throughput: int
    users_by_memory: int
    users_by_throughput: int
    users_total: int
    users_per_gpu: float
    limit: Literal["memory", "throughput"]


class SizeReport(_Out):
    fits: bool = Field(description="one max-model-len request fits next to the weights")
    verdict: str
    deployment: Deployment
    memory: KvMemory
    throughput: Throughput
    users: Users
    is_estimate: bool = True
    assumptions: list[str]
    notes: list[str]


def size(model: str | dict[str, object], gpu: str, *, gpus: int | None = None,
         tp: int | None = None, pp: int = 1, max_model_len: int | None = None,
         concurrency: int | None = None, kv_cache_dtype: str | None = None,
         gpu_memory_utilization: float | None = None, quantization: str | None = None,
         active_share: float = DEFAULT_ACTIVE_SHARE,
         user_tokens_per_s: float = DEFAULT_USER_TOKENS_PER_S,
         read_files: bool = False) -> SizeReport:
    """The three calculators for MODEL on GPU. Raises SizeError/UnknownName (ValueErrors).

    MODEL is a catalog name, an HF id, free text, a config.json dict or pasted JSON; with
    `read_files` (the local CLI) also a config.json path or a checkpoint folder.
    """
    resolved = resolve_model(model, read_files=read_files)
    card = resolve_gpu(gpu)
    spec = resolved.spec
    tp = tp or gpus or 1
    gpus = gpus or tp * pp
    util = gpu_memory_utilization if gpu_memory_utilization is not None else DEFAULT_UTIL
    _validate(spec, tp, pp, gpus, util, active_share, user_tokens_per_s, max_model_len)
    length = max_model_len or spec.max_position_embeddings or 4096
    quant = quantization or resolved.quantization
    facts = Facts(engine="vllm", model=spec.id, gpu_name=card.name,
                  gpu_total_gib=card.memory_gib, gpu_count=gpus, tensor_parallel_size=tp,
                  pipeline_parallel_size=pp, max_model_len=length,
                  gpu_memory_utilization=util, kv_cache_dtype=kv_cache_dtype,
                  quantization=quant)
    sizing = compute_sizing(facts, ModelLookup(resolved))
    layout = KvLayout.build(spec, tp, pp, kv_cache_dtype, DEFAULT_BLOCK)
    memory = _memory(sizing, layout, length, concurrency)
    batch = concurrency or _memory_batch(memory)
    fmt = weight_format(quant, resolved.weight_dtype)
    through = _throughput(spec, card, layout, fmt, tp, pp, batch, length)
    users = _users(spec, card, layout, fmt, tp, pp, length, memory, gpus // (tp * pp), gpus,
                   active_share, user_tokens_per_s)
    deployment = Deployment(
        model=spec.id, model_quantization=quant, gpu=card.name,
        gpu_memory_gib=round(card.memory_gib, 2), gpus=gpus, tensor_parallel_size=tp,
        pipeline_parallel_size=pp, replicas=gpus // (tp * pp), max_model_len=length,
        kv_cache_dtype=kv_cache_dtype or "auto", gpu_memory_utilization=util)
    assumptions = [
        f"GPU memory {card.memory_mib:.0f} MiB (catalog, as nvidia-smi reports it); "
        f"bandwidth {card.bandwidth_gbs:.0f} GB/s; dense bf16 {card.bf16_tflops:.0f} TFLOP/s; "
        f"{EFFICIENCY:.0%} of both reached in decode",
        f"weights {fmt}: {BYTES_PER_PARAM[fmt]} bytes/parameter",
        "decode step = max(bytes read / bandwidth, FLOPs / peak); weights read once per step, "
        f"KV read for every sequence at the average context ({length // 2} tokens)",
        "tensor-parallel communication and prefill are not modelled (ceilings, not promises)",
        f"{active_share:.0%} of connected users generate at any moment, each wanting "
        f"{user_tokens_per_s:g} tokens/s; memory is sized for max-model-len requests "
        "(vLLM's worst case)",
    ]
    fits, verdict = _verdict(sizing, memory, users, through, length)
    return SizeReport(fits=fits, verdict=verdict, deployment=deployment, memory=memory,
                      throughput=through, users=users, assumptions=assumptions,
                      notes=list(sizing.notes))


def _verdict(s: Sizing, m: KvMemory, u: Users, t: Throughput, length: int) -> tuple[bool, str]:
    """The answer first: does it fit, and if not, the cheapest change that makes it fit."""
    tips = []
    if s.extra.suggested_tensor_parallel_size:
        tips.append(f"--tensor-parallel-size {s.extra.suggested_tensor_parallel_size} "
                    f"(largest max-model-len {s.extra.tp_max_model_len})")
    if s.extra.quantized_max_model_len:
        tips.append(f"4-bit weights ({s.extra.quantized_weights_gib:.2f} GiB per GPU, "
                    f"largest max-model-len {s.extra.quantized_max_model_len})")
    hint = f"; try {' or '.join(tips)}" if tips else ""
    avail = m.kv_available_gib
    if avail is not None and avail <= 0:
        return False, (f"Does not fit: weights {m.weights_gib:.2f} GiB per GPU leave no KV cache "
                       f"in the {_g(m.budget_gib)} budget{hint}.")
    fit = m.max_model_len_that_fits
    if fit is not None and fit < length:
        return False, (f"One {length}-token request does not fit: the largest max-model-len is "
                       f"{fit}{hint}.")
    return True, (f"About {u.users_total} concurrent users ({u.users_per_gpu} per GPU), limited "
                  f"by {u.limit}; {t.tokens_per_s:g} tokens/s per replica at batch {t.batch}. "
                  "Estimates.")


def _validate(spec: ModelSpec, tp: int, pp: int, gpus: int, util: float, share: float,
              rate: float, length: int | None) -> None:
    if tp < 1 or pp < 1 or gpus < 1:
        raise SizeError("--tp, --pp and --gpus must be at least 1")
    if spec.num_attention_heads % tp:
        raise SizeError(f"--tp {tp} does not divide the {spec.num_attention_heads} attention "
                        "heads (vLLM requires it)")
    if gpus < tp * pp:
        raise SizeError(f"--gpus {gpus} is fewer than TP x PP = {tp * pp}")
    if not 0 < util <= 1:
        raise SizeError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    if not 0 < share <= 1 or rate <= 0:
        raise SizeError("active share must be in (0, 1] and tokens/s per user positive")
    if length is not None and length < 1:
        raise SizeError("--max-model-len must be positive")


def _memory(s: Sizing, layout: KvLayout, length: int, concurrency: int | None) -> KvMemory:
    per_seq = layout.needed_bytes(length) / GIB
    blocks = s.extra.num_gpu_blocks
    fit_seqs = layout.concurrency(blocks, length) if blocks is not None else None
    batch = concurrency or max(1, math.floor(fit_seqs or 1))
    return KvMemory(
        kv_bytes_per_token=layout.bytes_per_token, kv_bytes_per_block=layout.bytes_per_block,
        block_size=layout.block_size, kv_per_sequence_gib=round(per_seq, 3),
        concurrency=batch, kv_per_batch_gib=round(per_seq * batch, 3),
        weights_gib=round(s.weights_gib or 0.0, 3), activation_gib=s.extra.activation_gib,
        non_torch_gib=s.extra.non_torch_gib, budget_gib=s.budget_gib,
        kv_available_gib=s.kv_cache_available_gib,
        sequences_fit=round(fit_seqs, 2) if fit_seqs is not None else None,
        kv_cache_tokens=s.extra.kv_cache_tokens,
        max_model_len_that_fits=s.max_model_len_that_fits,
        batch_fits=(per_seq * batch <= s.kv_cache_available_gib
                    if s.kv_cache_available_gib is not None else None),
        fp8_max_model_len=s.extra.fp8_max_model_len)


def _memory_batch(m: KvMemory) -> int:
    """With no --concurrency: as many max-model-len sequences as fit (capped like max_num_seqs)."""
    return max(1, min(DEFAULT_MAX_NUM_SEQS, math.floor(m.sequences_fit or 1)))


def _step(spec: ModelSpec, card: GpuSpec, layout: KvLayout, fmt: str, tp: int, pp: int,
          batch: int, avg_context: int) -> tuple[float, float, float]:
    """(seconds, bytes, FLOPs) of one decode step on one GPU of the replica."""
    params = spec.params or 0.0
    active = spec.active_params or params
    shards = tp * pp
    # MoE: at batch b roughly min(all, b x active) expert weights are touched per step.
    read_params = min(params, active * batch)
    weight_bytes = read_params * BYTES_PER_PARAM[fmt] / shards
    kv_tokens = batch * cdiv(avg_context, layout.block_size) * layout.block_size
    kv_bytes = kv_tokens * layout.bytes_per_token / pp
    flops = 2 * active * batch / shards
    t_mem = (weight_bytes + kv_bytes) / (card.bandwidth_gbs * 1e9 * EFFICIENCY)
    t_cmp = flops / (card.bf16_tflops * 1e12 * EFFICIENCY)
    # Pipeline stages run one after another for a single token's decode step.
    return max(t_mem, t_cmp) * pp, weight_bytes + kv_bytes, flops


def _throughput(spec: ModelSpec, card: GpuSpec, layout: KvLayout, fmt: str, tp: int, pp: int,
                batch: int, length: int) -> Throughput:
    avg = max(1, length // 2)
    t, nbytes, flops = _step(spec, card, layout, fmt, tp, pp, batch, avg)
    t_mem = nbytes / (card.bandwidth_gbs * 1e9 * EFFICIENCY)
    t1, _, _ = _step(spec, card, layout, fmt, tp, pp, 1, avg)
    return Throughput(
        batch=batch, avg_context=avg, bytes_per_step_gib=round(nbytes / GIB, 3),
        flops_per_step_t=round(flops / 1e12, 4), step_ms=round(t * 1e3, 3),
        bound="memory" if t_mem * pp >= t - 1e-15 else "compute",
        tokens_per_s=round(batch / t, 1), tokens_per_s_per_user=round(1 / t, 1),
        single_stream_tokens_per_s=round(1 / t1, 1))


def _users(spec: ModelSpec, card: GpuSpec, layout: KvLayout, fmt: str, tp: int, pp: int,
           length: int, memory: KvMemory, replicas: int, gpus: int, share: float,
           rate: float) -> Users:
    by_memory = math.floor(memory.sequences_fit or 0) * replicas
    avg = max(1, length // 2)
    lo, hi = 0, 1
    while hi < 65536 and 1 / _step(spec, card, layout, fmt, tp, pp, hi, avg)[0] >= rate:
        lo, hi = hi, hi * 2
    while lo + 1 < hi:  # the largest batch whose per-user rate still meets `rate`
        mid = (lo + hi) // 2
        if 1 / _step(spec, card, layout, fmt, tp, pp, mid, avg)[0] >= rate:
            lo = mid
        else:
            hi = mid
    by_tput = lo * replicas
    users_mem, users_tput = math.floor(by_memory / share), math.floor(by_tput / share)
    total = min(users_mem, users_tput)
    return Users(active_share=share, user_tokens_per_s=rate, active_by_memory=by_memory,
                 active_by_throughput=by_tput, users_by_memory=users_mem,
                 users_by_throughput=users_tput, users_total=total,
                 users_per_gpu=round(total / gpus, 1),
                 limit="memory" if users_mem <= users_tput else "throughput")


def render_size_text(report: SizeReport) -> str:
    """The report as terminal text: the answer first, then each calculator, then assumptions."""
    d, m, t, u = report.deployment, report.memory, report.throughput, report.users
    quant = f" ({d.model_quantization})" if d.model_quantization else ""
    lines = [
        f"{d.model}{quant} on {d.gpus} x {d.gpu} (TP {d.tensor_parallel_size}, PP "
        f"{d.pipeline_parallel_size}, {d.replicas} replica(s)), max-model-len {d.max_model_len}, "
        f"kv-cache-dtype {d.kv_cache_dtype}, gpu-memory-utilization {d.gpu_memory_utilization}",
        report.verdict,
        "",
        "KV cache memory (per GPU rank)",
        f"  per token      {fmt_bytes(m.kv_bytes_per_token)}"
        f" ({m.kv_bytes_per_token:,} B; block of {m.block_size}: "
        f"{fmt_bytes(m.kv_bytes_per_block)})",
        f"  per sequence   {m.kv_per_sequence_gib:.2f} GiB at {d.max_model_len} tokens",
        f"  per batch      {m.kv_per_batch_gib:.2f} GiB for {m.concurrency} sequences"
        + ("" if m.batch_fits is None else " (fits)" if m.batch_fits else " (does NOT fit)"),
        f"  budget         {_g(m.budget_gib)} = weights {_g(m.weights_gib)} + activation "
        f"{_g(m.activation_gib)} + non-torch {_g(m.non_torch_gib)} + KV {_g(m.kv_available_gib)}",
        f"  sequences fit  {m.sequences_fit} at max-model-len ({m.kv_cache_tokens} tokens); "
        f"largest max-model-len for one request: {m.max_model_len_that_fits}",
    ]
    if m.fp8_max_model_len is not None:
        lines.append(f"  with fp8 KV    largest max-model-len {m.fp8_max_model_len}")
    lines += [
        "",
        f"Throughput (roofline, one replica, batch {t.batch}, avg context {t.avg_context})",
        f"  per step       {t.bytes_per_step_gib:.2f} GiB read, {t.flops_per_step_t:g} TFLOP "
        f"-> {t.step_ms:.2f} ms ({t.bound}-bound)",
        f"  decode         {t.tokens_per_s:g} tokens/s total, {t.tokens_per_s_per_user:g} per "
        f"user; single stream {t.single_stream_tokens_per_s:g} tokens/s",
        "",
        f"Concurrent users ({u.active_share:.0%} active, {u.user_tokens_per_s:g} tokens/s each)",
        f"  memory         {u.active_by_memory} active -> {u.users_by_memory} users",
        f"  throughput     {u.active_by_throughput} active -> {u.users_by_throughput} users",
        f"  answer         {u.users_total} users ({u.users_per_gpu} per GPU), {u.limit}-limited",
        "",
        "Assumptions",
        *(f"  - {a}" for a in report.assumptions),
    ]
    if report.notes:
        lines += ["Notes", *(f"  - {n}" for n in report.notes)]
    return "\n".join(lines)


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f} GiB"

