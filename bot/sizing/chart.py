"""The memory-budget chart: where one GPU's memory goes, and the KV a request needs.

`chart_data` only reads figures a Diagnosis (its Sizing) or a SizeReport already holds, so
the picture can never disagree with the numbers in the answer; `write_chart` draws them.
matplotlib is imported inside `write_chart` only: `inferbot diagnose` without `--chart` must
not pay for it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from bot.schema import Diagnosis

if TYPE_CHECKING:
    from bot.sizing.calculators import SizeReport

COLORS = {
    "weights": "#4c72b0", "activation": "#dd8452", "other": "#937860",
    "cuda_graphs": "#8172b3", "kv_available": "#55a868", "foreign": "#c44e52",
    "headroom": "#cccccc", "kv_needed": "#da8bc3",
}


@dataclass(slots=True)
class Segment:
    label: str
    kind: str  # a COLORS key
    gib: float


@dataclass(slots=True)
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
    if s is None:
        raise ValueError("this diagnosis has no memory arithmetic to chart")
    x = s.extra
    segs: list[Segment] = []
    _add(segs, "weights", "weights", s.weights_gib)
    if x.activation_gib is not None or x.non_torch_gib is not None:
        _add(segs, "activation peak", "activation", x.activation_gib)
        _add(segs, "non-torch (NCCL, cuBLAS)", "other", x.non_torch_gib)
    elif x.non_kv_gib is not None and s.weights_gib is not None:
        _add(segs, "activation + non-torch", "other", x.non_kv_gib - s.weights_gib)
    _add(segs, "KV available", "kv_available", s.kv_cache_available_gib)
    _add(segs, "CUDA graphs", "cuda_graphs", x.cuda_graph_gib)
    _add(segs, "other processes", "foreign", x.foreign_processes_gib)
    _add(segs, "headroom", "headroom", x.headroom_gib)
    model = d.facts.model or x.model_id or "model"
    length = x.target_max_model_len
    return ChartData(
        title=f"{model} on {d.facts.gpu_name or 'GPU'}: memory budget per GPU",
        total_gib=x.gpu_total_gib, budget_gib=s.budget_gib, segments=segs,
        kv_available_gib=s.kv_cache_available_gib, kv_needed_gib=s.kv_cache_needed_gib,
        needed_label=f"KV needed ({length} tokens)" if length else "KV needed",
        is_estimate=s.is_estimate)


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
        is_estimate=r.is_estimate)


def chart_png(source: Diagnosis | SizeReport) -> bytes | None:
    """The chart as PNG bytes (what a chat upload needs); None when there is nothing to draw."""
    try:
        data = chart_data(source)
    except ValueError:
        return None
    png = io.BytesIO()
    write_chart(data, png)
    return png.getvalue()


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
                        label=f"{seg.label} {seg.gib:.2f} GiB")
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
        kv = [("KV available", data.kv_available_gib, COLORS["kv_available"]),
              (data.needed_label, data.kv_needed_gib, COLORS["kv_needed"])]
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
