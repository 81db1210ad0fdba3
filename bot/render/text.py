"""Diagnosis -> terminal text, in reading order: short answer, proof, numbers, fixes, checks.

The same `numbers()` lines feed the Slack renderer, so the arithmetic reads the same in the
terminal and in the thread.
"""

from __future__ import annotations

from typing import NamedTuple

from bot.fmt import clip, gib
from bot.schema import Diagnosis, Facts, Sizing

PROSE_NOTE = "from your description, not a log line: weaker evidence"


class Headline(NamedTuple):
    """What an answer leads with, whatever renders it: the problem (or, when no problem family
    matched, the cause a line named outright), its explanation and the lines that show it."""

    title: str
    label: str  # the id and how sure
    summary: str
    proof: list[tuple[int | None, str]]


def headline(d: Diagnosis) -> Headline | None:
    if d.problems:
        top = d.problems[0]
        label = f"{top.id}, confidence {top.confidence:.2f}"
        if top.from_prose:
            label += f", {PROSE_NOTE}"
        summary = d.guide.short_answer if d.guide and d.guide.short_answer else top.summary
        proof: list[tuple[int | None, str]] = list(
            zip(top.line_numbers, top.evidence, strict=False))
        return Headline(top.title, label, summary, proof)
    named = [c for c in d.causes if c.supported]
    if not named:
        return None
    c = named[0]
    return Headline(c.title, f"{c.id}, confidence {c.confidence:.2f}", c.explanation.strip(),
                    [(None, c.why)] if c.why else [])


def cause_lines(d: Diagnosis, host: str | None = None) -> list[str]:
    """The ranked causes, each with its evidence, and one line for the rest."""
    out = []
    for i, c in enumerate(d.causes, 1):
        out.append(f"{i}. {c.title}" + (f": {c.why}" if c.why else ""))
    if d.more_causes:
        names = ", ".join(c.title[:1].lower() + c.title[1:] for c in d.more_causes[:4])
        where = f"inferbot check {host}" if host else "inferbot check HOST"
        out.append(f"Not ruled out: {names}; `{where}` (the host's own numbers) would decide.")
    return out


def _int(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def numbers(d: Diagnosis) -> list[str]:
    """The memory arithmetic with this host's numbers; only lines whose inputs are known."""
    f: Facts = d.facts
    s: Sizing | None = d.sizing
    out: list[str] = []
    total = f.gpu_total_gib if f.gpu_total_gib is not None else (
        s.extra.gpu_total_gib if s else None)
    if f.gpu_name or total is not None:
        parts = [f.gpu_name] if f.gpu_name else []
        if f.gpu_count and f.gpu_count > 1:
            parts.append(f"x{f.gpu_count}")
        if total is not None:
            parts.append(f"{gib(total)} total")
        if f.free_memory_gib is not None:
            parts.append(f"{gib(f.free_memory_gib)} free at start")
        out.append("GPU: " + ", ".join(parts).replace(", x", " x", 1))
    budget = f.budget_gib if f.budget_gib is not None else (s.budget_gib if s else None)
    if budget is not None:
        util = f.gpu_memory_utilization
        product = f"{gib(f.gpu_total_gib)} x {util} = " if f.gpu_total_gib and util else ""
        out.append(f"Budget (gpu_memory_utilization): {product}{gib(budget)}")
    elif f.requested_memory_gib is not None:
        out.append(f"Requested at start-up: {f.gpu_memory_utilization} x "
                   f"{gib(f.gpu_total_gib)} = {gib(f.requested_memory_gib)}")
    weights = f.weights_gib if f.weights_gib is not None else (s.weights_gib if s else None)
    if weights is not None:
        extra = []
        if f.activation_peak_gib is not None:
            extra.append(f"activation peak {gib(f.activation_peak_gib)}")
        if f.non_torch_gib is not None:
            extra.append(f"non-torch {gib(f.non_torch_gib)}")
        if f.cuda_graph_gib is not None:
            extra.append(f"CUDA graphs {gib(f.cuda_graph_gib)}")
        est = " (estimated)" if f.weights_gib is None and s and s.is_estimate else ""
        out.append(f"Weights: {gib(weights)}{est}" + (f"; {', '.join(extra)}" if extra else ""))
    if f.foreign_processes_gib:
        out.append(f"Held by other processes: {gib(f.foreign_processes_gib)}")
    avail = f.kv_cache_available_gib
    if avail is None and s:
        avail = s.kv_cache_available_gib
    needed = f.kv_cache_needed_gib
    if needed is None and s:
        needed = s.kv_cache_needed_gib
    if avail is not None or needed is not None:
        line = f"KV cache available: {gib(avail)}"
        if needed is not None:
            at = f" at max-model-len {_int(f.max_model_len)}" if f.max_model_len else ""
            line += f"; needed for one request{at}: {gib(needed)}"
        out.append(line)
    if s and s.kv_bytes_per_token:
        out.append(f"KV per token: {s.kv_bytes_per_token:,} bytes"
                   + (f" ({s.kv_bytes_per_block:,} per {s.block_size}-token block)"
                      if s.kv_bytes_per_block and s.block_size else ""))
    fit = s.max_model_len_that_fits if s else None
    if fit is None:
        fit = f.estimated_max_model_len
    if fit is not None:
        out.append(f"Largest max-model-len that fits: {_int(fit)}")
    if f.gpu_blocks is not None or f.kv_cache_tokens is not None:
        out.append(f"KV cache: {_int(f.gpu_blocks)} blocks, {_int(f.kv_cache_tokens)} tokens")
    conc = f.max_concurrency if f.max_concurrency is not None else (s.max_concurrency if s
                                                                    else None)
    if conc is not None:
        at = f" at {_int(f.concurrency_tokens or f.max_model_len)} tokens" if (
            f.concurrency_tokens or f.max_model_len) else ""
        out.append(f"Max concurrency{at}: {conc:.2f}x")
    if s and s.is_estimate:
        out.append("(estimated from the model and GPU catalogs: the log did not print these)")
    for note in s.notes if s else []:
        out.append(f"note: {note}")
    return out


def render(d: Diagnosis) -> str:
    lines: list[str] = []
    head = headline(d)
    if head is None:
        lines.append("No known problem matched.")
        if d.input.note:
            lines.append(d.input.note)
        lines.extend(d.notes)
        known = d.facts.known()
        known.pop("gpus", None)
        known.pop("processes", None)
        if known:
            lines.append("")
            lines.append("What I could read:")
            lines.extend(f"  {k}: {v}" for k, v in known.items())
            nums = numbers(d)
            if nums:
                lines.append("")
                lines.append("The numbers for that model on that GPU:")
                lines.extend(f"  {n}" for n in nums)
        else:
            lines.append("Nothing in it looks like a vLLM, SGLang, TGI or GPU message I know.")
        lines.append("")
        lines.append(f"KB {d.kb_version} ({d.kb_hash})")
        return "\n".join(lines)

    lines.append(f"{head.title}  [{head.label}]")
    if head.summary:
        lines.append(head.summary)
    lines.append("")
    lines.append("Evidence:")
    for no, text in head.proof:
        shown = clip(text, 240)
        lines.append(f"  line {no}: {shown}" if no is not None else f"  {shown}")
    if len(d.problems) > 1:
        also = ", ".join(f"{p.id} ({p.confidence:.2f})" for p in d.problems[1:])
        lines.append(f"Also seen: {also}")
    lines.extend(f"note: {n}" for n in d.notes)
    nums = numbers(d)
    if nums:
        lines.append("")
        lines.append("The numbers:")
        lines.extend(f"  {n}" for n in nums)
    causes = cause_lines(d, d.host)
    if causes:
        lines.append("")
        lines.append("Likely causes:")
        lines.extend(f"  {c}" for c in causes)
    if d.fixes:
        lines.append("")
        lines.append("Fix it (least disruptive first):")
        for i, fx in enumerate(d.fixes, 1):
            lines.append(f"  {i}. {fx.title}")
            lines.append(f"     $ {fx.command}")
            if fx.predicted:
                lines.append(f"     -> {fx.predicted}")
            if not fx.computed:
                lines.append("     (example value: the evidence does not show the numbers)")
    if d.withheld_fixes:
        lines.append("")
        lines.append("Not proposed here:")
        for w in d.withheld_fixes:
            lines.append(f"  - {w.title}: {w.reason}")
    if d.guide and d.guide.confirm:
        lines.append("")
        lines.append("How to confirm:")
        lines.extend(f"  - {c}" for c in d.guide.confirm)
    if d.guide and d.guide.diagnostics:
        lines.append("")
        lines.append("Diagnostic commands:")
        for step in d.guide.diagnostics:
            lines.append(f"  {step.title}")
            if step.command:
                lines.append(f"     $ {step.command}")
    if d.input.note:
        lines.append("")
        lines.append(f"note: {d.input.note}")
    lines.append("")
    lines.append(f"KB {d.kb_version} ({d.kb_hash}) · fingerprint {d.fingerprint.digest}")
    return "\n".join(lines)


