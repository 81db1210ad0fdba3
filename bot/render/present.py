"""Diagnosis (and its history) -> the answer's content: ordered sections, each either on the
first screen or in the details. The terminal (bot.render.text), Slack (bot.slack.blocks) and
`--json` (bot.render.jsonout) only lay these out; none of them decides what is said.

The first screen is what an on-call engineer reads on a phone at night: what broke with its
key numbers (model, GPU), the history line, the one command to run, and why in one line.
Everything else (all the numbers, other causes and fixes, withheld fixes with their reasons,
how to confirm, diagnostic commands, prevention, FAQ) is one click or `--full` away.
Internal ids (signature, cause, group ids) never appear in the text; proof lines are said
once; a section with nothing to say is left out.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import field
from typing import TYPE_CHECKING, Literal

from bot.fmt import clip, gib
from bot.schema import Diagnosis, Facts, Fix, Sizing
from bot.structs import struct

if TYPE_CHECKING:
    from datetime import datetime

PROSE_NOTE = "from your description, not a log line: weaker evidence"
WHY_CHARS = 220
Kind = Literal["text", "command", "quote"]


@struct(frozen=True, slots=True)
class Mention:
    """A person: a Slack user id (`U0ALICE001`, shown as a mention) or a login."""

    user: str


@struct(frozen=True, slots=True)
class Link:
    """A link shown by its label (Slack renders it, the terminal prints both)."""
    url: str
    label: str


Part = str | Mention | Link


@struct(frozen=True, slots=True)
class Line:
    """One line of a section: words with any mentions and links, and what kind of line it is
    (a command to copy, a quoted log line, or text)."""

    parts: tuple[Part, ...]
    kind: Kind = "text"

    @classmethod
    def of(cls, text: str, kind: Kind = "text") -> Line:
        return cls((text,), kind)

    @property
    def plain(self) -> str:
        """As text without markup: a mention as @user, a link as its label and address."""
        out = []
        for p in self.parts:
            if isinstance(p, Mention):
                out.append(f"@{p.user}")
            elif isinstance(p, Link):
                out.append(f"{p.label} ({p.url})")
            else:
                out.append(p)
        return "".join(out)


@struct(slots=True)
class Section:
    """One part of an answer (headline, fix, why, numbers...), as lines of parts."""
    key: str  # what it holds: headline, history, fix, why, proof, numbers, causes, ...
    title: str  # "" on the first screen's own lines
    lines: list[Line]
    first: bool = False  # on the first screen


@struct(frozen=True, slots=True)
class Choice:
    """A proposed fix that "This fixed it" can name: pasteable, no placeholder."""

    fix_id: str
    label: str


@struct(slots=True)
class Presentation:
    """An answer laid out once for every renderer: sections, first screen, choices."""
    title: str
    matched: bool
    sections: list[Section]
    choices: list[Choice] = field(default_factory=list)

    @property
    def first(self) -> list[Section]:
        return [s for s in self.sections if s.first]

    @property
    def details(self) -> list[Section]:
        return [s for s in self.sections if not s.first]


@struct(frozen=True, slots=True)
class History:
    """What the store knows of this failure: the line "seen 4 times in 7 days on gpu-07; last
    fixed 2 days ago by @alice with --max-model-len 32768 (thread)" is made of it."""

    incident_id: int
    count: int
    first_seen: datetime | None = None
    hosts: tuple[str, ...] = ()
    status: Literal["open", "resolved"] = "open"
    fixed_with: str | None = None
    fixed_by: str | None = None
    fixed_at: datetime | None = None
    fixed_link: str | None = None  # the thread where it was fixed
    corrections: int = 0  # "Not right?" notes people left on this failure


def confidence_word(value: float) -> str:
    return "high" if value >= 0.85 else "medium" if value >= 0.6 else "low"


def ago(when: datetime | None, now: datetime | None = None) -> str:
    """'2 days ago', '3 hours ago', 'just now'."""
    from datetime import UTC, datetime  # only an answer with history shows a time

    if when is None:
        return "at an unknown time"
    now = now or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = max(0.0, (now - when).total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def _span(first: datetime | None, now: datetime) -> str:
    from datetime import UTC

    if first is None:
        return ""
    if first.tzinfo is None:
        first = first.replace(tzinfo=UTC)
    days = max(1, round((now - first).total_seconds() / 86400 + 0.5))
    return f" in {days} day{'s' if days != 1 else ''}"


def history_line(h: History, now: datetime | None = None) -> Line:
    from datetime import UTC, datetime

    now = now or datetime.now(UTC)
    if h.count <= 1 and not h.fixed_with:
        parts: list[Part] = ["first time seen"]
    else:
        hosts = " and ".join(h.hosts[:3])
        parts = [f"seen {h.count} times{_span(h.first_seen, now)}"
                 + (f" on {hosts}" if hosts else "")]
        if h.fixed_with:
            parts.append(f"; last fixed {ago(h.fixed_at, now)}")
            if h.fixed_by:
                parts += [" by ", Mention(h.fixed_by)]
            parts.append(f" with {h.fixed_with}")
            if h.fixed_link:
                parts += [" (", Link(h.fixed_link, "thread"), ")"]
        else:
            parts.append("; never marked fixed")
    if h.corrections:
        parts.append(f"; {h.corrections} note{'s' if h.corrections != 1 else ''} that the "
                     "answer was not right")
    return Line(tuple(parts))


# --------------------------------------------------------------------------- the numbers


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
        out.append("GPU: " + gpu_words(f, total, free=True))
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
    avail, needed = _kv(d)
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


def fit_answer(d: Diagnosis) -> str | None:
    """Whether the model a question names fits the GPUs it names, in one sentence from the
    sizing ("will qwen 72b fit on two h100s?"); None when the paste reports a failure or the
    sizing lacks the weights or the budget."""
    f, s = d.facts, d.sizing
    if d.problems or s is None or not f.model or s.weights_gib is None or s.budget_gib is None:
        return None
    shards = f.tensor_parallel_size or f.gpu_count or 1
    per = f"{gib(s.weights_gib)} of weights per GPU" + (f" at TP {shards}" if shards > 1 else "")
    if s.weights_gib >= s.budget_gib:
        return (f"Does not fit: {per} against a {gib(s.budget_gib)} budget per GPU; more GPUs "
                "or a quantized checkpoint are needed.")
    fits = s.max_model_len_that_fits
    if not fits:
        return f"The weights load ({per}) but leave no room for the KV cache."
    target = s.extra.target_max_model_len
    at = (f"; {s.max_concurrency:.2f}x concurrency at {target:,} tokens"
          if s.max_concurrency is not None and target else "")
    return f"Fits with {per}: the KV cache holds one request of up to {fits:,} tokens{at}."


def size_command(d: Diagnosis) -> str:
    """`inferbot size` for the model and GPUs the paste names, as the calculator takes them."""
    f, s = d.facts, d.sizing
    model = (s.extra.model_id if s is not None and s.extra.model_id else None) or f.model or ""
    words = ["inferbot size", shlex.quote(model), "--gpu", shlex.quote(f.gpu_name or "GPU")]
    if f.gpu_count and f.gpu_count > 1:
        words += ["--gpus", str(f.gpu_count), "--tp", str(f.tensor_parallel_size or f.gpu_count)]
    return " ".join(words)


def _kv(d: Diagnosis) -> tuple[float | None, float | None]:
    f, s = d.facts, d.sizing
    avail = f.kv_cache_available_gib if f.kv_cache_available_gib is not None else (
        s.kv_cache_available_gib if s else None)
    needed = f.kv_cache_needed_gib if f.kv_cache_needed_gib is not None else (
        s.kv_cache_needed_gib if s else None)
    return avail, needed


def gpu_words(f: Facts, total: float | None, *, free: bool = False) -> str:
    parts = [f.gpu_name] if f.gpu_name else []
    if f.gpu_count and f.gpu_count > 1:
        parts.append(f"x{f.gpu_count}")
    if total is not None:
        parts.append(f"{gib(total)} total")
    if free and f.free_memory_gib is not None:
        parts.append(f"{gib(f.free_memory_gib)} free at start")
    return ", ".join(parts).replace(", x", " x", 1)


def key_numbers(d: Diagnosis) -> list[str]:
    """The two or three numbers the first screen names: the model, the GPU, and the one
    figure this failure turns on."""
    f, s = d.facts, d.sizing
    out = [f.model] if f.model else []
    total = f.gpu_total_gib if f.gpu_total_gib is not None else (
        s.extra.gpu_total_gib if s and not s.is_estimate else None)
    if f.gpu_name or total is not None:
        out.append(gpu_words(f, total))
    avail, needed = _kv(d)
    if needed is not None and avail is not None:
        at = f" at {f.max_model_len:,} tokens" if f.max_model_len else ""
        out.append(f"one request{at} needs {gib(needed)} of KV cache, {gib(avail)} available")
    elif f.oom_tried_to_allocate_gib is not None:
        free = f" with {gib(f.oom_free_gib)} free" if f.oom_free_gib is not None else ""
        out.append(f"tried to allocate {gib(f.oom_tried_to_allocate_gib)}{free}")
    elif f.preemptions:
        out.append(f"{f.preemptions:,} preemptions")
    elif f.weights_gib is not None and f.budget_gib is not None:
        out.append(f"weights {gib(f.weights_gib)} of a {gib(f.budget_gib)} budget")
    return out


# --------------------------------------------------------------------------- the answer


def _title(d: Diagnosis) -> tuple[str, float | None, bool, str]:
    """What broke, how sure, whether only prose shows it, and the summary."""
    if d.problems:
        top = d.problems[0]
        summary = d.guide.short_answer if d.guide and d.guide.short_answer else top.summary
        return top.title, top.confidence, top.from_prose, summary
    named = [c for c in d.causes if c.supported]
    if named:
        return named[0].title, named[0].confidence, False, named[0].explanation.strip()
    return "No known problem matched", None, False, ""


def _proof(d: Diagnosis) -> list[tuple[int | None, str]]:
    if d.problems:
        top = d.problems[0]
        return list(zip(top.line_numbers, top.evidence, strict=False))
    named = [c for c in d.causes if c.supported and c.why]
    return [(None, named[0].why)] if named else []


def _quotes(why: str) -> bool:
    return why.startswith(("the log says", "you wrote", "possible:"))


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _numbers_in(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def why_line(d: Diagnosis, summary: str, said: str = "") -> str:
    """Why, in one line: the top supported cause, with the parts of its reasoning the key
    numbers (`said`) do not already give (a quoted log line is the proof's, not said again),
    else the first sentence of the KB's short answer."""
    cause = next((c for c in d.causes if c.supported), None)
    if cause is not None:
        known = _numbers_in(said)
        parts = [p for p in cause.why.split("; ") if p and not _quotes(p)
                 and len(_numbers_in(p) & known) < 2]
        text = cause.title + (": " + "; ".join(parts) if parts else "")
    else:
        text = summary.split(". ", 1)[0].rstrip(".")
    text = " ".join(text.split())
    return text if len(text) <= WHY_CHARS else text[:WHY_CHARS - 1].rstrip() + "…"


def _fix_lines(fx: Fix, *, full: bool) -> list[Line]:
    if fx.instruction:
        lines = [Line.of(fx.instruction)]
        if full:
            lines.append(Line.of(fx.command, "command"))
        return lines
    if "MODEL" in fx.placeholders and fx.change:
        # the server's command line is not in the evidence: the change is what to do
        lines = [Line.of(f"restart the server with {fx.change} (keep its other flags)")]
        if full:
            lines.append(Line.of(fx.command, "command"))
        return lines
    lines = [Line.of(fx.command, "command")]
    if fx.change:
        lines.append(Line.of(f"change: {fx.change}"))
    if full and fx.args:
        lines.append(Line.of("as the container's args (the manifest):"))
        lines.append(Line.of("args: " + json.dumps(fx.args), "quote"))
    if full and fx.env:
        lines.append(Line.of("in the server's environment, as it was set:"))
        lines += [Line.of(line, "quote") for line in fx.env]
    return lines


def _choice(fx: Fix) -> Choice | None:
    if fx.instruction or any(p != "MODEL" for p in fx.placeholders):
        return None
    label = fx.change or fx.command
    return Choice(fx.id, label)


def present(d: Diagnosis, history: History | None = None, *, host: str | None = None
            ) -> Presentation:
    """The answer to `d`, in reading order."""
    title, confidence, prose, summary = _title(d)
    if confidence is None:
        return _no_match(d, history)
    head = " · ".join(key_numbers(d))
    sure = f"{confidence_word(confidence)} confidence"
    if prose:
        sure += f", {PROSE_NOTE}"
    sections = [Section("headline", "", [Line.of(head + (" · " if head else "") + sure)],
                        first=True)]
    if history is not None:
        sections.append(Section("history", "", [history_line(history)], first=True))
    fixes = d.fixes
    if fixes:
        sections.append(Section("fix", "Run", _fix_lines(fixes[0], full=False), first=True))
    sections.append(Section("why", "Why", [Line.of(why_line(d, summary, head))], first=True))
    # ---- the details
    if summary:
        sections.append(Section("summary", "What it means", [Line.of(summary)]))
    proof = _proof(d)
    if proof:
        sections.append(Section("proof", "The lines that show it", [
            Line.of(f"line {no}: {text}" if no is not None else text, "quote")
            for no, text in proof]))
    nums = numbers(d)
    if nums:
        sections.append(Section("numbers", "The numbers", [Line.of(n) for n in nums]))
    causes = _cause_lines(d, proof, host)
    if causes:
        sections.append(Section("causes", "Likely causes", causes))
    if fixes:
        lines: list[Line] = []
        for i, fx in enumerate(fixes, 1):
            lines.append(Line.of(f"{i}. {fx.title}"))
            lines.extend(_fix_lines(fx, full=True))
            if fx.predicted:
                lines.append(Line.of(f"-> {fx.predicted}"))
            if not fx.computed:
                lines.append(Line.of("(example value: the evidence does not show the numbers)"))
        sections.append(Section("fixes", "All fixes (least disruptive first)", lines))
    if d.withheld_fixes:
        sections.append(Section("withheld", "Not proposed here", [
            Line.of(f"{w.title}: {w.reason}") for w in d.withheld_fixes]))
    g = d.guide
    if g and g.confirm:
        sections.append(Section("confirm", "How to confirm", [Line.of(c) for c in g.confirm]))
    if g and g.diagnostics:
        diag: list[Line] = []
        for step in g.diagnostics:
            diag.append(Line.of(step.title))
            if step.command:
                diag.append(Line.of(step.command, "command"))
        sections.append(Section("diagnostics", "Diagnostic commands", diag))
    if g and g.prevention:
        sections.append(Section("prevention", "Prevention",
                                [Line.of(p) for p in g.prevention]))
    if g and g.faq:
        sections.append(Section("faq", "FAQ", [Line.of(f"{q['q']} {q['a']}".strip())
                                               for q in g.faq if q.get("q")]))
    if g and (g.affects or g.architecture):
        about = [Line.of(t) for t in (g.affects, g.architecture) if t]
        sections.append(Section("affects", "Where this applies", about))
    notes = [Line.of(n) for n in d.notes]
    if len(d.problems) > 1:
        notes.append(Line.of("Also seen: " + "; ".join(p.title for p in d.problems[1:6])))
    if d.input.note:
        notes.append(Line.of(d.input.note))
    if notes:
        sections.append(Section("notes", "Notes", notes))
    sections.append(Section("about", "", [Line.of(f"knowledge base {d.kb_version}")]))
    choices = [c for fx in fixes if (c := _choice(fx)) is not None]
    return Presentation(title, True, sections, choices)


def _mid_sentence(title: str) -> str:
    """A title inside a sentence: "Another process ..." -> "another process ...", but an
    acronym keeps its case ("NCCL cannot ...", "CUDA-graph capture ...")."""
    if title[1:2].isupper():
        return title
    return title[:1].lower() + title[1:]


def _cause_lines(d: Diagnosis, proof: list[tuple[int | None, str]], host: str | None
                 ) -> list[Line]:
    """The ranked causes with their evidence; a line the proof already quotes is not said
    again."""
    quoted = [text for _, text in proof]
    out = []
    for i, c in enumerate(d.causes, 1):
        why = c.why
        if why and any(_same_line(why, q) for q in quoted):
            why = "the line above"
        out.append(Line.of(f"{i}. {c.title}" + (f": {why}" if why else "")))
    if d.more_causes:
        names = ", ".join(_mid_sentence(c.title) for c in d.more_causes[:4])
        where = f"inferbot check {host}" if host else "inferbot check HOST"
        out.append(Line.of(f"Not ruled out: {names}; `{where}` (the host's own numbers) "
                           "would decide."))
    return out


def _same_line(why: str, quoted: str) -> bool:
    """A cause's why that only quotes a proof line (`the log says "..." (line 10)`)."""
    if not _quotes(why) or '"' not in why:
        return False
    inner = why.split('"', 2)[1].rstrip("…")
    return bool(inner) and inner[:80] in " ".join(quoted.split())


def _raised(d: Diagnosis) -> str | None:
    """What a paste that matched nothing raised, in words."""
    r = d.exception
    if r is None:
        return None
    where = ("in your code" if r.package == "" else f"raised in {r.package}" if r.package
             else "")
    return (f"A Python {r.type}{' ' + where if where else ''}, not an engine or GPU message "
            "I know.")


def _no_match(d: Diagnosis, history: History | None) -> Presentation:
    seen = [d.input.note] if d.input.note else []
    raised = _raised(d)
    if raised:
        seen.append(raised)
    seen += d.notes
    known = {k: v for k, v in d.facts.known().items() if k not in ("gpus", "processes")}
    fit = fit_answer(d)
    if fit is not None:
        # a question about a model and a GPU, not a failure: the answer is the arithmetic
        seen.insert(0, fit)
    if not known and not seen:
        seen.append("Nothing in it looks like a vLLM, SGLang, TGI or GPU message I know.")
    help_line = ("Paste the whole error in a code block, attach the server's log (a snippet "
                 "file), or ask for `check HOST` to read the host's own numbers.")
    if d.exception is not None:
        help_line = ("If the server failed too, paste its own log (the lines before this "
                     "traceback, or `docker logs` of the server); the exception itself is in "
                     "the details.")
    if fit is not None:
        help_line = ("Other lengths, concurrency or an fp8 KV cache: "
                     f"`{size_command(d)}` with --max-model-len, --concurrency or "
                     "--kv-cache-dtype fp8; if a server failed, paste its log.")
    if known and fit is None:
        read = ", ".join(f"{k}: {v}" for k, v in list(known.items())[:4])
        seen.append(clip(f"I could read {read}, but no failure I know in it.", 300))
    sections = [Section("headline", "", [Line.of(s) for s in seen], first=True)]
    if history is not None:
        sections.append(Section("history", "", [history_line(history)], first=True))
    sections.append(Section("help", "What would help", [Line.of(help_line)], first=True))
    if d.exception is not None and d.exception.line:
        sections.append(Section("raised", "The line that raised it",
                                [Line.of(d.exception.line, "quote")]))
    if known:
        sections.append(Section("read", "What I could read", [
            Line.of(f"{k}: {v}") for k, v in known.items()]))
        nums = numbers(d)
        if nums:
            sections.append(Section("numbers", "The numbers for that model on that GPU",
                                    [Line.of(n) for n in nums]))
    sections.append(Section("about", "", [Line.of(f"knowledge base {d.kb_version}")]))
    title = f"Sizing: {d.facts.model} on {gpu_words(d.facts, None)}" if fit else (
        "No known problem matched.")
    return Presentation(title, False, sections)
