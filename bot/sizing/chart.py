"""The memory-budget chart: where one GPU's memory goes, and the KV a request needs.

`chart_data` only reads figures a Diagnosis (its Sizing) or a SizeReport already holds, so
the picture can never disagree with the numbers in the answer; `write_chart` draws them.
matplotlib is imported inside `write_chart` only: `inferbot diagnose` without `--chart` must
not pay for it.

A chart is drawn only when it tells this incident's story: the weights and the budget known,
and the KV cache available or other processes known; for a CUDA OOM, the failing allocation
against what was free. Never a blank chart, never a bar past the GPU's total (vLLM 0.8 and
later count other processes inside its non-torch memory: they are not added twice), and
estimated segments are hatched. `sentence` is the chart's one line, the upload's comment.
"""

from __future__ import annotations

import io
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from bot.schema import Diagnosis
from bot.structs import struct

if TYPE_CHECKING:
    from bot.sizing.calculators import SizeReport

COLORS = {
    "weights": "#4c72b0", "activation": "#dd8452", "other": "#937860",
    "cuda_graphs": "#8172b3", "kv_available": "#55a868", "foreign": "#c44e52",
    "headroom": "#cccccc", "kv_needed": "#da8bc3",
}


@struct(slots=True)
class Segment:
    label: str
    kind: str  # a COLORS key
    gib: float
    estimated: bool = False  # from the catalogs, not the log: hatched


@struct(slots=True)
class ChartData:
    """One GPU rank, bottom to top: the budget's parts, then what lies outside the budget."""

    title: str
    total_gib: float | None
    budget_gib: float | None
    segments: list[Segment] = field(default_factory=list)
    kv_available_gib: float | None = None
    kv_needed_gib: float | None = None
    needed_label: str = "KV needed"
    is_estimate: bool = False
    after_fix: tuple[str, float] | None = None  # the KV one request needs after fix 1
    sentence: str = ""  # the chart's story in one line

    def value(self, kind: str) -> float | None:
        return next((s.gib for s in self.segments if s.kind == kind), None)


def chart_data(source: Diagnosis | SizeReport) -> ChartData:
    """The bars, from a Diagnosis (its sizing) or a SizeReport. ValueError if there is none."""
    if isinstance(source, Diagnosis):
        return _from_diagnosis(source)
    return _from_size_report(source)


def _add(segments: list[Segment], label: str, kind: str, gib: float | None) -> None:
    if gib is not None:
        segments.append(Segment(label, kind, float(gib)))


def _from_diagnosis(d: Diagnosis) -> ChartData:
    s = d.sizing
    f = d.facts
    if f.oom_tried_to_allocate_gib is not None and f.oom_free_gib is not None and (
            f.gpu_total_gib or (s is not None and s.extra.gpu_total_gib)):
        return _oom(d)
    if s is None:
        raise ValueError("this diagnosis has no memory arithmetic to chart")
    x = s.extra
    if s.weights_gib is None or s.budget_gib is None or (
            s.kv_cache_available_gib is None and not x.foreign_processes_gib):
        raise ValueError("the numbers do not tell this incident's story: the weights, the "
                         "budget and the KV cache (or other processes) are needed")
    segs: list[Segment] = []
    _add(segs, "weights", "weights", s.weights_gib)
    if f.weights_gib is None and s.is_estimate:
        segs[-1].estimated = True
    if x.activation_gib is not None or x.non_torch_gib is not None:
        _add(segs, "activation peak", "activation", x.activation_gib)
        _add(segs, "non-torch (NCCL, cuBLAS)", "other", x.non_torch_gib)
    elif x.non_kv_gib is not None and s.weights_gib is not None:
        _add(segs, "activation + non-torch", "other", x.non_kv_gib - s.weights_gib)
    _add(segs, "KV available", "kv_available", s.kv_cache_available_gib)
    _add(segs, "CUDA graphs", "cuda_graphs", x.cuda_graph_gib)
    _add(segs, "other processes", "foreign", x.foreign_processes_gib)
    _add(segs, "headroom", "headroom", x.headroom_gib)
    _within(segs, x.gpu_total_gib)
    model = d.facts.model or x.model_id or "model"
    length = x.target_max_model_len
    after = _after_fix(d, length)
    avail, needed = s.kv_cache_available_gib, s.kv_cache_needed_gib
    if avail is not None and needed is not None:
        sentence = (f"One request at {length:,} tokens needs {needed:.2f} GiB of KV cache; "
                    f"{avail:.2f} GiB are left after the weights" if length else
                    f"KV needed {needed:.2f} GiB, available {avail:.2f} GiB")
        if after:
            sentence += f"; after fix 1 it needs {after[1]:.2f} GiB"
    else:
        sentence = (f"Weights {s.weights_gib:.2f} GiB of a {s.budget_gib:.2f} GiB budget"
                    + (f"; other processes hold {x.foreign_processes_gib:.2f} GiB"
                       if x.foreign_processes_gib else ""))
    return ChartData(
        title=f"{model} on {d.facts.gpu_name or 'GPU'}: memory budget per GPU",
        total_gib=x.gpu_total_gib, budget_gib=s.budget_gib, segments=segs,
        kv_available_gib=avail, kv_needed_gib=needed,
        needed_label=f"KV needed ({length} tokens)" if length else "KV needed",
        is_estimate=s.is_estimate, after_fix=after, sentence=sentence + ".")


def _within(segs: list[Segment], total: float | None) -> None:
    """Never past the GPU's total: what is over comes off the headroom, then off the other
    processes (vLLM 0.8 and later already count them in its non-torch memory)."""
    if total is None:
        return
    over = sum(max(s.gib, 0.0) for s in segs) - total
    for kind in ("headroom", "foreign"):
        for seg in segs:
            if over > 1e-9 and seg.kind == kind:
                cut = min(seg.gib, over)
                seg.gib, over = seg.gib - cut, over - cut
    segs[:] = [s for s in segs if s.gib > 1e-9 or s.kind == "kv_available"]


def _after_fix(d: Diagnosis, length: int | None) -> tuple[str, float] | None:
    """The KV one request needs at the length fix 1 sets (a lower --max-model-len)."""
    s = d.sizing
    fix = d.fixes[0] if d.fixes else None
    new = fix.flags.get("--max-model-len") if fix else None
    if s is None or not isinstance(new, int) or not length or s.kv_cache_needed_gib is None:
        return None
    return f"after fix 1 ({new:,} tokens)", s.kv_cache_needed_gib * new / length


def _oom(d: Diagnosis) -> ChartData:
    """A CUDA OOM: the GPU as the allocator saw it when the allocation failed, and the
    allocation that did not fit beside what was free."""
    f = d.facts
    total = f.gpu_total_gib or (d.sizing.extra.gpu_total_gib if d.sizing else None)
    tried, free = f.oom_tried_to_allocate_gib, f.oom_free_gib
    assert tried is not None and free is not None
    segs: list[Segment] = []
    _add(segs, "this process (PyTorch)", "weights", f.oom_reserved_gib)
    others = [p for p in f.processes if not p.is_server and p.used_mib]
    for p in others[:6]:
        _add(segs, f"pid {p.pid} {p.name or ''}".strip(), "foreign", (p.used_mib or 0) / 1024)
    if not others:
        _add(segs, "outside PyTorch (other processes, CUDA context)", "other",
             f.oom_outside_pytorch_gib)
    _add(segs, "free", "headroom", free)
    _within(segs, total)
    return ChartData(
        title=f"{f.model or 'the server'}: CUDA out of memory on GPU {f.oom_gpu_index or 0}",
        total_gib=total, budget_gib=None, segments=segs, kv_available_gib=free,
        kv_needed_gib=tried, needed_label="tried to allocate",
        sentence=f"It tried to allocate {tried:.2f} GiB with {free:.2f} GiB free"
                 + (f"; {len(others)} other process(es) held memory" if others else "") + ".")


def _from_size_report(r: SizeReport) -> ChartData:
    m, dep = r.memory, r.deployment
    segs: list[Segment] = []
    _add(segs, "weights", "weights", m.weights_gib)
    _add(segs, "activation peak", "activation", m.activation_gib)
    _add(segs, "non-torch (NCCL, cuBLAS)", "other", m.non_torch_gib)
    _add(segs, "KV available", "kv_available", m.kv_available_gib)
    if m.budget_gib is not None:
        _add(segs, "headroom", "headroom", dep.gpu_memory_gib - m.budget_gib)
    return ChartData(
        title=f"{dep.model} on {dep.gpu}: memory budget per GPU", total_gib=dep.gpu_memory_gib,
        budget_gib=m.budget_gib, segments=segs, kv_available_gib=m.kv_available_gib,
        kv_needed_gib=m.kv_per_batch_gib,
        needed_label=f"KV needed ({m.concurrency} x {dep.max_model_len} tokens)",
        is_estimate=r.is_estimate,
        sentence=(f"{m.concurrency} requests of {dep.max_model_len:,} tokens need "
                  f"{m.kv_per_batch_gib:.2f} GiB of KV cache; {m.kv_available_gib:.2f} GiB "
                  "are available." if m.kv_per_batch_gib is not None
                  and m.kv_available_gib is not None else ""))


def chart_png(source: Diagnosis | SizeReport) -> tuple[bytes, str] | None:
    """The chart as PNG bytes (what a chat upload needs) and its one sentence; None when the
    numbers cannot tell a story."""
    try:
        data = chart_data(source)
    except ValueError:
        return None
    png = io.BytesIO()
    write_chart(data, png)
    return png.getvalue(), data.sentence


def write_chart(data: ChartData, path: str | Path | BinaryIO) -> None:
    """Draw `data` as a PNG at `path`, or into a binary stream (matplotlib, Agg backend,
    imported here only)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (gpu_ax, kv_ax) = plt.subplots(
        2, 1, figsize=(9, 4.2), gridspec_kw={"height_ratios": [1.3, 1]})
    try:
        left = 0.0
        for seg in data.segments:
            width = max(seg.gib, 0.0)  # a negative KV figure is annotated, not drawn
            gpu_ax.barh(0, width, left=left, color=COLORS[seg.kind], edgecolor="white",
                        hatch="//" if seg.estimated else None,
                        label=f"{seg.label} {seg.gib:.2f} GiB"
                              + (" (estimated)" if seg.estimated else ""))
            left += width
        if data.budget_gib is not None:
            gpu_ax.axvline(data.budget_gib, color="black", linestyle="--", linewidth=1)
            gpu_ax.text(data.budget_gib, 0.45, f" budget {data.budget_gib:.2f} GiB",
                        fontsize=8, va="bottom")
        if data.total_gib is not None:
            gpu_ax.set_xlim(0, max(data.total_gib, left) * 1.02)
            # where the GPU ends: what lies past this line does not fit at all
            gpu_ax.axvline(data.total_gib, color="#c44e52", linewidth=1.5)
            gpu_ax.text(data.total_gib, -0.38, f" GPU {data.total_gib:.2f} GiB", fontsize=8,
                        va="bottom", color="#c44e52",
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        gpu_ax.set_yticks([0], ["GPU"])
        gpu_ax.set_xlabel("GiB")
        gpu_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3,
                      frameon=False)
        kv = [("free" if data.budget_gib is None else "KV available", data.kv_available_gib,
               COLORS["kv_available"]),
              (data.needed_label, data.kv_needed_gib, COLORS["kv_needed"])]
        if data.after_fix is not None:
            kv.append((data.after_fix[0], data.after_fix[1], COLORS["kv_available"]))
        shown = [(label, v, c) for label, v, c in kv if v is not None]
        for i, (_, v, c) in enumerate(shown):
            kv_ax.barh(i, max(v, 0.0), color=c)
            kv_ax.text(max(v, 0.0), i, f" {v:.2f} GiB", va="center", fontsize=8)
        kv_ax.set_yticks(range(len(shown)), [label for label, _, _ in shown], fontsize=8)
        kv_ax.set_xlabel("GiB")
        title = data.title + (" (estimate)" if data.is_estimate else "")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path if not isinstance(path, str | Path) else str(path), format="png",
                    dpi=110)
    finally:
        plt.close(fig)
