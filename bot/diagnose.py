"""The core: Evidence -> Diagnosis. Pure: no network, no database, no Slack, no terminal.

One pass over the text feeds the evidence extractors (facts) and the KB matcher (problems) at
the same time; the sizing planner then ranks causes by those facts and turns them into fixes.
Every adapter (CLI, Slack, collector) calls `diagnose` and renders or stores what it returns.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Sequence
from typing import Any, BinaryIO

from bot.evidence import EXTRACTORS
from bot.evidence.base import FactSink
from bot.evidence.families import FAMILIES, Family
from bot.evidence.paste import MAX_PASTE_BYTES, Unwrapped, unwrap
from bot.evidence.redact import redact
from bot.evidence.scan import SNIFF, Scanner, looks_binary
from bot.fingerprint import fingerprint, signature_line
from bot.kb.loader import KB
from bot.kb.match import CompiledKB, Matcher
from bot.schema import (
    Diagnosis,
    Evidence,
    Facts,
    Guide,
    GuideStep,
    InputStats,
    ProblemMatch,
    field_names,
)
from bot.sizing.command import CommandReader
from bot.sizing.plan import plan

MAX_EXCERPT_LINES = 40
MAX_EXCERPT_CHARS = 8000


_COMPILED: dict[str, CompiledKB] = {}


def compiled_kb(kb: KB) -> CompiledKB:
    """Compiled patterns, once per KB content: a long-running bot diagnoses many pastes."""
    compiled = _COMPILED.get(kb.content_hash)
    if compiled is None:
        if len(_COMPILED) > 4:
            _COMPILED.clear()
        compiled = _COMPILED[kb.content_hash] = CompiledKB(kb)
    return compiled


def diagnose(evidence: Evidence, kb: KB, stream: BinaryIO | None = None, *,
             families: Sequence[Family] = FAMILIES) -> Diagnosis:
    """Diagnose `evidence`. A file is passed as `stream`: up to MAX_PASTE_BYTES it is read as a
    paste, beyond that it is scanned in bounded chunks; otherwise `evidence.text` is read.
    `families`: the repeated line shapes the scan folds; () reads every line one by one, the
    reading folding must equal."""
    sink = FactSink()
    compiled = compiled_kb(kb)
    matcher = Matcher(compiled)
    command = CommandReader()
    source, paste = _input(evidence.text, stream, compiled.vocabulary)
    scanner = Scanner([*(cls() for cls in EXTRACTORS), matcher, command], large=paste is None,
                      families=families)
    stats = scanner.scan(source if paste is None else paste.text, sink)
    if paste is not None:
        # counted on the paste as sent, not on its rebuilt lines
        assert isinstance(source, bytes)
        stats.bytes = len(source)
        stats.lines = source.count(b"\n") + (0 if source.endswith(b"\n") or not source else 1)
        matcher.renumber(paste.raw_line)

    problems = matcher.problems(redact)
    # the phase the paste shows at the deciding line, else the one the symptom implies, else
    # where the log had got to
    phase = (problems[0].phase or kb.problems[problems[0].id].phase) if problems else None
    facts = dataclasses.replace(_merge(sink.build(), evidence.collected),
                                phase=phase or matcher.phase.last_milestone())
    # causes quote the lines that support them: redacted, as every line that leaves the core
    hits = {sid: [h._replace(line=redact(h.line)) for h in seen]
            for sid, seen in matcher.hits.items()}
    result = plan(kb, problems, facts, evidence.model_config_json, hits,
                  command=command.command)
    problems = result.problems

    top = problems[0] if problems else None
    key = fingerprint(top.id if top else None, signature_line(top.evidence if top else []),
                      evidence.host, facts.model)
    return Diagnosis(
        kb_version=kb.version,
        kb_hash=kb.content_hash,
        fingerprint=key,
        host=evidence.host,
        problems=problems,
        causes=result.causes,
        more_causes=result.more_causes,
        facts=facts,
        sizing=result.sizing,
        fixes=result.fixes,
        withheld_fixes=result.withheld,
        guide=_guide(kb, top.id) if top else None,
        input=_input_stats(stats.bytes, stats.lines, stats.binary, stats.long_lines),
        excerpt=_excerpt(problems),
        notes=result.notes,
        server_command=command.observed,
    )


def _input(text: str, stream: BinaryIO | None, vocabulary: frozenset[str]
           ) -> tuple[Any, Unwrapped | None]:
    """What to scan: a paste (bytes, with its logical lines) or a stream too large to be one."""
    if stream is None:
        raw = text.encode("utf-8", "surrogateescape")
        if len(raw) > MAX_PASTE_BYTES or looks_binary(raw[:SNIFF]):
            return raw, None
    else:
        raw = stream.read(MAX_PASTE_BYTES + 1)
        if len(raw) > MAX_PASTE_BYTES:
            return _Rejoined(raw, stream), None
        if looks_binary(raw[:SNIFF]):
            return raw, None
    return raw, unwrap(raw.decode("utf-8", "replace"), vocabulary)


class _Rejoined(io.RawIOBase):
    """A stream whose first bytes were already read to tell a paste from a log."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._head:
            out = self._head if size < 0 else self._head[:size]
            self._head = self._head[len(out):]
            return out
        return self._rest.read(size)


def _merge(from_text: Facts, collected: Facts | None) -> Facts:
    """Facts read from the host win over facts read from pasted text: they are current."""
    if collected is None:
        return from_text
    updates = {name: getattr(collected, name) for name in field_names(Facts)
               if getattr(collected, name) not in (None, [])}
    return dataclasses.replace(from_text, **updates)


def _guide(kb: KB, problem_id: str) -> Guide:
    p = kb.problems[problem_id]
    return Guide(
        short_answer=p.short_answer.strip(),
        confirm=list(p.confirm),
        diagnostics=[GuideStep(title=d.title, command=d.command, explain=d.explain)
                     for d in p.diagnostics],
        prevention=list(p.prevention),
        architecture=p.architecture.strip(),
        faq=[{"q": f.q, "a": f.a} for f in p.faq],
        affects=p.affects.strip(),
    )


def _input_stats(n_bytes: int, lines: int, binary: bool, long_lines: int) -> InputStats:
    note = None
    if n_bytes == 0:
        note = "the input is empty: paste the error or the log, or name a host"
    elif binary:
        note = "the input looks binary, not a text log; only readable lines were checked"
    elif long_lines:
        note = f"{long_lines} very long line(s) were read around their key phrases only"
    return InputStats(bytes=n_bytes, lines=lines, binary=binary, note=note)


def _excerpt(problems: list[ProblemMatch]) -> str:
    """The lines that matter, redacted and bounded: what is stored and shown as proof."""
    seen: dict[int, str] = {}
    for p in problems:
        for no, line in zip(p.line_numbers, p.evidence, strict=False):
            seen.setdefault(no, line)
    lines = [f"{no}: {line}" for no, line in sorted(seen.items())[:MAX_EXCERPT_LINES]]
    return "\n".join(lines)[:MAX_EXCERPT_CHARS]
