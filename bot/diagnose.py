"""The core: Evidence -> Diagnosis. Pure: no network, no database, no Slack, no terminal.

One pass over the text feeds the evidence extractors (facts) and the KB matcher (problems) at
the same time; the sizing planner then ranks causes by those facts and turns them into fixes.
Every adapter (CLI, Slack, collector) calls `diagnose` and renders or stores what it returns.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Sequence
from typing import Any, BinaryIO, ClassVar

from bot.evidence import EXTRACTORS
from bot.evidence.base import FactSink, Line
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
    Raised,
    field_names,
)
from bot.sizing.command import CommandReader, EnvReader
from bot.sizing.plan import plan

MAX_EXCERPT_LINES = 40
MAX_EXCERPT_CHARS = 8000
# A Python exception as a traceback ends: `json.decoder.JSONDecodeError: Expecting value`.
_EXCEPTION = re.compile(r"(?:^|[\s:\]])((?:[A-Za-z_]\w{0,40}\.){0,6}[A-Z]\w{0,60}"
                        r"(?:Error|Exception|Interrupt|Exit))(?::|$)")
_FRAME = re.compile(r'File "([^"]{1,400})", line \d{1,9}')


class ExceptionReader:
    """A scan consumer: the last Python exception the paste raised and the file of its last
    frame, which say what a paste that matches no known problem is."""

    name: ClassVar[str] = "exception"
    anchors: ClassVar[tuple[str, ...]] = ("Error", "Exception", 'File "')
    follow: ClassVar[int] = 0

    def __init__(self) -> None:
        self.exception: str | None = None
        self.line = ""
        self.frame: str | None = None

    def feed(self, line: Line, sink: FactSink) -> None:
        frame = _FRAME.search(line.text)
        if frame:
            path = frame.group(1).replace("\\", "/")
            # the standard library only carries the call on: the caller is who raised it
            if "/lib/python3" not in path or "-packages/" in path:
                self.frame = path
            return
        m = _EXCEPTION.search(line.text)
        if m:
            self.exception, self.line = m.group(1).rsplit(".", 1)[-1], line.text

    def finish(self, sink: FactSink) -> None:
        pass

    def where(self) -> str | None:
        """Whose code raised it: the package of the last frame, or the user's own code."""
        if self.frame is None:
            return None
        parts = self.frame.split("/")
        for marker in ("site-packages", "dist-packages"):
            if marker in parts and parts.index(marker) + 1 < len(parts):
                return parts[parts.index(marker) + 1].removesuffix(".py")
        return ""  # not in an installed package: the user's own code


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
    env = EnvReader()
    raised = ExceptionReader()
    source, paste = _input(evidence.text, stream, compiled.vocabulary)
    scanner = Scanner([*(cls() for cls in EXTRACTORS), matcher, command, env, raised],
                      large=paste is None, families=families)
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
                  command=command.command, env=env.settings)
    problems = result.problems

    top = problems[0] if problems else None
    if top is not None:
        key = fingerprint(top.id, signature_line(top.evidence), evidence.host, facts.model)
    else:
        # Pastes that match nothing do not share one group: the same exception type groups,
        # else the paste's own last line (the same paste twice is one thing; two unrelated
        # tracebacks are two).
        last = _last_line(paste.text if paste is not None else "")
        key = fingerprint(f"unmatched:{raised.exception}" if raised.exception else None,
                          None if raised.exception else redact(last), evidence.host,
                          facts.model)
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
        exception=Raised(type=raised.exception, line=redact(raised.line)[:500],
                         package=raised.where()) if raised.exception and not top else None,
    )


def _last_line(text: str) -> str:
    return next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")


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
