"""Matching KB signatures against the lines the scanner offers, and ranking the problems.

Ranking follows how an on-call engineer reads a log: the error that ended the process beats the
warnings before it (kind first: error > warning > prose > info), a more specific signature beats
a generic one (weight), and between equals the later line wins (the last start attempt is the
one that failed). A person's words (`prose`) rank below the log's errors and warnings, and a
memory or performance problem only they support is dropped when the paste names a failure
that is not about GPU memory: a sentence of framing ("OOM") never outranks, or adds to, a line
that shows otherwise (an NCCL timeout, the host's OOM killer). A `fallback` signature (a CUDA
OOM with no phase) only counts on lines no specific signature explained.

Causes have signatures too (a line that names the cause outright, such as "must be divisible
by tensor parallel size"); their hits are kept per signature for the planner.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import field
from functools import cached_property
from typing import NamedTuple

from ahocorasick_rs import AhoCorasick

from bot.evidence.base import FactSink, Fold, Line, Probe
from bot.evidence.paste import is_prose
from bot.kb.loader import KB
from bot.kb.phase import TRACEBACK, PhaseMarkers, PhaseTracker
from bot.kb.schema import Signature
from bot.lazyre import LazyPattern
from bot.schema import ProblemMatch
from bot.structs import struct

KIND_RANK = {"error": 4, "warning": 3, "prose": 2, "info": 1}
MAX_EVIDENCE = 5
MAX_DEFERRED = 200  # lines waiting for their phase until the end of the input
# What an exception or a killed process prints: a paste holding one shows how a traceback
# ended, so a `cut` signature (a frame whose error line is missing) does not guess it.
EXCEPTION_MARKS = ("Error:", "Exception:", "error:", "Error(", "Error [CUDA]:", "Killed",
                   "Segmentation fault")
# What a server failing prints, whatever the failure: beside it a performance finding (a
# fallback kernel's warning, a speed complaint) is not the problem.
FAILURE_MARKS = (*EXCEPTION_MARKS, "Traceback (most recent call last)", "failed to start",
                 "initialization failed")
# A logger's level in a line's first words: a message the program itself logged at INFO or
# WARNING ("Failed to import from vllm._C with ImportError('libcuda.so.1: ...')") is not what
# ended it, whatever its words.
_LOW_LEVEL = LazyPattern(r"^.{0,100}?\b(?:(?P<low>INFO|WARNING|WARN|DEBUG)|ERROR|CRITICAL|FATAL)\b")
# a traceback's source line ("raise RuntimeError(error_msg)"): the code, not the error
_SOURCE_LINE = LazyPattern(r"\braise [\w.]{0,60}(?:Error|Exception)\b")
# exceptions that only report another process's failure ("See root cause above")
_WRAPPER = LazyPattern(r"Engine core initialization failed|See root cause above|"
                       r"Error executing method|(?:failed|dead)[,.]? {0,2}terminating")
# a line showing an exception of its own: the first such line is what the matcher reads
# A phase phrase the sentence denies: "even before any inference requests are sent" says the
# failure was not while serving requests; "(e.g., CUDA Graphs)" in torch's own OOM text names
# an example, not where it failed, and its "might be asynchronously reported at some other API
# call" names none. The words just before the phrase are read.
_DENIED = LazyPattern(
    r"(?:\b(?:before|without|no|not|never|prior to)\b(?:\W{1,3}\w{1,20}){0,3}|"
    r"\be\.g\.|\bsuch as|\bat some other)\W{0,3}$")
# ... or the words just after it: "`Profiling CUDA graph memory` is never reached", or a phase
# that went well ("启动正常", "started fine": the failure came later)
_DENIED_AFTER = LazyPattern(
    r"[\w`'\" ]{0,30}?\b(?:is|was|gets?|got)? ?(?:never|not) (?:reached|hit|run|started)\b|"
    r"\s?(?:正常|成功|没问题|没有问题|fine\b|normally\b|successfully\b)")
_SHOWN = Probe(LazyPattern("|".join(re.escape(m) for m in EXCEPTION_MARKS)),
               lambda m: _WRAPPER.search(m.string) is None, last=0)


def _starts_word(text: str, start: int) -> bool:
    """A phrase found at `start` begins a word (an identifier's part after `_` included):
    "a call" is not said in "cuda call failed", "cudagraph" is in "profile_cudagraph_memory".
    The end is left open: "a request" is said in "a requests' burst" too."""
    if start == 0 or not text[start].isascii() or not text[start].isalnum():
        return True
    before = text[start - 1]
    return not (before.isascii() and before.isalnum())


@struct(frozen=True)
class CompiledSignature:
    """A signature ready to match: its regexes, anchors and context lines resolved."""
    owner: str  # the problem or cause id
    of_cause: bool
    sig: Signature
    regex: LazyPattern
    with_any: tuple[LazyPattern, ...]
    anchors: tuple[str, ...]
    ctx_any: tuple[int, ...]
    ctx_none: tuple[int, ...]


class _Place(NamedTuple):
    at: int  # where in the line the signature matched
    near: int  # how far its placing words (with_any) stood from that, for a person's words


class SignatureHit(NamedTuple):
    """Where a signature matched: what a cause's `why` quotes."""

    line_no: int
    line: str
    kind: str
    phase: str | None
    at: int = 0  # where in the line the signature matched


# `_ProblemHits.nearest` when no words placed the report
NO_PLACE = 10**6
# Words further than this from a report's failure words do not say where it failed.
PLACING_CHARS = 40


@struct
class _ProblemHits:
    """What one problem's signatures matched so far while a paste is read."""
    best_kind: int = 0
    best_weight: float = 0.0
    last_line: int = 0
    signature_ids: list[str] = field(default_factory=list)
    lines: list[tuple[int, str]] = field(default_factory=list)
    count: int = 0
    phase: str | None = None  # the phase at the line that decided the problem
    error_message: bool = False  # an error signature matched, in the log or quoted by a person
    # On the deciding line, how far (characters) the words that placed a person's report
    # stood from its failure words: in "启动...时占用13G，但是调用服务后，就显存溢出了"
    # the call (调用) stands next to the OOM, the start (启动) far from it. NO_PLACE when
    # no words placed it.
    nearest: int = NO_PLACE


def _placed(nearest: int) -> int:
    """How near words placed a report, counting only words close to its failure words: two
    far from them ("Can increasing tensor_parallel_size ... not enough to ... loading") place
    nothing."""
    return nearest if nearest <= PLACING_CHARS else NO_PLACE


def _nearest(m: re.Match[str], with_any: tuple[LazyPattern, ...], text: str) -> int:
    """How close the nearest `with_any` match stands to the signature's match `m`, in
    characters (0 when they overlap); NO_PLACE when none matches."""
    best = NO_PLACE
    for pattern in with_any:
        for w in pattern.finditer(text):
            gap = m.start() - w.end() if w.end() <= m.start() else max(0, w.start() - m.end())
            best = min(best, gap)
    return best


class CompiledKB:
    """Signatures and context patterns compiled once per KB (the KB's content hash)."""

    def __init__(self, kb: KB) -> None:
        self.kb = kb
        ctx_index: dict[str, int] = {}
        ctx: list[tuple[LazyPattern, tuple[str, ...]]] = []

        def ctx_id(pattern: str) -> int:
            if pattern not in ctx_index:
                ctx_index[pattern] = len(ctx)
                ctx.append((LazyPattern(pattern), kb.anchors[pattern]))
            return ctx_index[pattern]

        owned = [(p.id, False, sig) for p in kb.problems.values() for sig in p.signatures]
        owned += [(c.id, True, sig) for c in kb.causes.values() for sig in c.signatures]
        sigs: list[CompiledSignature] = []
        for owner, of_cause, sig in owned:
            flags = re.IGNORECASE if sig.ignore_case else 0
            if sig.kind == "prose":
                # people mix scripts ("报ray oom的错"): a word boundary is one between ASCII
                # word characters and anything else
                flags |= re.ASCII
            any_ids = tuple(ctx_id(p) for p in sig.context.any) if sig.context else ()
            none_ids = tuple(ctx_id(p) for p in sig.context.none) if sig.context else ()
            sigs.append(CompiledSignature(
                owner, of_cause, sig, LazyPattern(sig.pattern, flags),
                tuple(LazyPattern(p, flags) for p in sig.with_any), kb.anchors[sig.id],
                any_ids, none_ids))
        self.signatures = sigs
        self.by_id = {cs.sig.id: cs for cs in sigs}
        self.contexts = ctx
        by_anchor: dict[str, list[int]] = {}
        by_folded: dict[str, list[int]] = {}
        for i, cs in enumerate(sigs):
            for a in cs.anchors:
                (by_folded if cs.sig.ignore_case else by_anchor).setdefault(a, []).append(i)
        self.phases = PhaseMarkers(kb.phases)
        for phrase in self.phases.said:
            by_folded.setdefault(phrase, [])  # searched for, but offers no signature
        self.by_anchor = by_anchor
        self.by_folded = by_folded
        self.folded_anchors = tuple(by_folded)
        self.folded_finder = AhoCorasick(list(by_folded)) if by_folded else None
        self.ctx_by_anchor: dict[str, list[int]] = {}
        for i, (_, anchors) in enumerate(ctx):
            for a in anchors:
                self.ctx_by_anchor.setdefault(a, []).append(i)
        self.phase_literals = frozenset(self.phases.literals)
        self.paste_literals = frozenset(a for cs in sigs for a in cs.sig.in_paste)
        self.anchors = tuple(dict.fromkeys([*by_anchor, *self.ctx_by_anchor,
                                            *self.phases.literals, *FAILURE_MARKS,
                                            *sorted(self.paste_literals)]))
        # which anchors a line holds, in one call rather than a substring test per anchor
        self.finder = AhoCorasick(list(self.anchors))
        self._vocabulary: frozenset[str] | None = None

    @property
    def vocabulary(self) -> frozenset[str]:
        """Words of the KB's signatures, titles and explanations and of the extractors' anchors:
        what a wrapped paste's cut words are checked against (bot.evidence.paste)."""
        if self._vocabulary is None:
            from bot.evidence import EXTRACTORS
            from bot.evidence.paste import words_of

            texts = [a for cls in EXTRACTORS for a in cls.anchors]
            for p in self.kb.problems.values():
                texts += [p.title, p.short_answer, *(s.pattern for s in p.signatures)]
            for c in self.kb.causes.values():
                texts += [c.title, c.explanation]
            self._vocabulary = frozenset(words_of(" ".join(texts)))
        return self._vocabulary

    @cached_property
    def fold(self) -> Fold:
        """How the matcher reads a program's line (bot.evidence.base.Fold; a family's line is
        never a person's, so prose signatures and phrases do not apply). A signature's anchor
        gates its regex: the first line it matches and the latest MAX_EVIDENCE - 1 are the
        evidence kept (a cause's: the first and the latest); a context's latest line is what
        the lines after it read. A milestone leaves its phase. A failure's or an exception's
        mark and a literal a signature looks for in the whole paste set what stays set (an
        exception's, only where it does not report another process's failure). A frame, a
        marker that needs further text, and a signature bound to a phase, kept as a fallback,
        read in a context, waiting for the paste's end or for a literal elsewhere make a line's
        reading depend on the lines around it: such a line is read whole."""
        gates: list[tuple[str, Probe]] = [(m, _SHOWN) for m in EXCEPTION_MARKS]
        whole: list[str] = [TRACEBACK]
        any_case: list[str] = []
        for cs in self.signatures:
            if cs.sig.kind == "prose":
                continue
            if cs.sig.ignore_case:
                any_case += cs.anchors  # found in the lower-cased line
                continue
            if cs.sig.phases or cs.sig.fallback or cs.sig.context or cs.sig.cut \
                    or cs.sig.in_paste:
                whole += cs.anchors
                continue
            probe = Probe(cs.regex, _AnyOf(cs.with_any) if cs.with_any else None, first=1,
                          last=1 if cs.of_cause else MAX_EVIDENCE - 1)
            gates += [(a, probe) for a in cs.anchors]
        for i, (pattern, anchors) in enumerate(self.contexts):
            probe = Probe(pattern, first=0, last=1)
            gates += [(a, probe) for a in anchors if i in self.ctx_by_anchor.get(a, ())]
        marks: list[tuple[str, int]] = []
        for literal, markers in self.phases.by_literal.items():
            if any(m.frame or m.also for m in markers):
                whole.append(literal)
            else:
                marks += [(literal, m.rank) for m in markers]
        return Fold(gates=tuple(gates), keys=(*FAILURE_MARKS, *sorted(self.paste_literals)),
                    whole=tuple(dict.fromkeys(whole)),
                    whole_any_case=tuple(dict.fromkeys(any_case)), marks=tuple(marks))


@struct(frozen=True)
class _AnyOf:
    """A signature's `with_any`: one of these must match the line too."""

    patterns: tuple[LazyPattern, ...]

    def __call__(self, match: re.Match[str]) -> bool:
        return any(p.search(match.string) for p in self.patterns)


class Matcher:
    """A scanner consumer: records which signatures matched which lines."""

    follow = 0

    def __init__(self, compiled: CompiledKB) -> None:
        self.compiled = compiled
        self.anchors = compiled.anchors
        self.folded_anchors = compiled.folded_anchors
        self._ctx_last: list[int] = [-(10**9)] * len(compiled.contexts)
        self._hits: dict[str, _ProblemHits] = {}
        # signature id -> its first and latest hit (problem and cause signatures alike)
        self.hits: dict[str, list[SignatureHit]] = {}
        self._owner = compiled.by_id
        self.phase = PhaseTracker(compiled.phases)
        self._deferred: list[tuple[Line, list[CompiledSignature]]] = []
        # frames of tracebacks whose error line may be cut, with their phase (the latest kept)
        self._cut: deque[tuple[Line, list[CompiledSignature], str | None]] = deque(
            maxlen=MAX_DEFERRED)
        self._exception_shown = False
        self._failed = False  # the paste shows the server failing (a traceback, an exception)
        # lines whose signatures need a literal elsewhere in the paste (`in_paste`), and the
        # literals seen so far
        self._needs: deque[tuple[Line, list[CompiledSignature], str | None]] = deque(
            maxlen=MAX_DEFERRED)
        self._seen_literals: set[str] = set()
        self._explained: set[int] = set()  # lines a specific problem signature matched

    @property
    def signatures_seen(self) -> set[str]:
        return set(self.hits)

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        comp = self.compiled
        present = {comp.anchors[idx] for idx, _, _ in
                   comp.finder.find_matches_as_indexes(text, overlapping=True)}
        if present & comp.phase_literals and not is_prose(text):
            # frames and milestones are the program's lines; a person naming `load_model` in a
            # sentence places nothing
            self.phase.see(text, line.no, present)
        if present & comp.paste_literals:
            self._seen_literals.update(present & comp.paste_literals)
        if not self._failed and any(m in present for m in FAILURE_MARKS) and not is_prose(text):
            self._failed = True
        if (not self._exception_shown and any(m in present for m in EXCEPTION_MARKS)
                and not _WRAPPER.search(text) and not _SOURCE_LINE.search(text)
                and not is_prose(text)):
            self._exception_shown = True
        for anchor in present:
            for i in comp.ctx_by_anchor.get(anchor, ()):
                if comp.contexts[i][0].search(text):
                    self._ctx_last[i] = line.no
        candidates: set[int] = set()
        for anchor in present:
            candidates.update(comp.by_anchor.get(anchor, ()))
        prose = None  # decided only when a phrase signature or phase phrase is a candidate
        if comp.folded_finder is not None:
            lowered = text.lower()
            folded = comp.folded_finder.find_matches_as_indexes(lowered, overlapping=True)
            said = None
            for idx, start, _ in folded:
                anchor = comp.folded_anchors[idx]
                candidates.update(comp.by_folded[anchor])
                if (anchor in comp.phases.said
                        and _starts_word(lowered, start)
                        and _DENIED.search(lowered, max(0, start - 48), start) is None
                        and _DENIED_AFTER.match(lowered, start + len(anchor)) is None
                        and (said is None
                             or comp.phases.said[anchor] <= comp.phases.said[said])):
                    # of two phases one sentence names ("graph capture fails during
                    # profiling"), the narrower; of two lines, the later
                    said = anchor
            if said is not None and (prose := is_prose(text)):
                self.phase.hear(said)
        if not candidates:
            return
        phase = self.phase.phase_at(text, line.no)
        offered = []
        for i in sorted(candidates):
            cs = comp.signatures[i]
            if cs.sig.kind == "prose":
                prose = is_prose(text) if prose is None else prose
                if not prose:
                    continue
            offered.append(cs)
        needs = [cs for cs in offered if cs.sig.in_paste]
        if needs:
            # decided at the end, once the whole paste has been seen
            self._needs.append((line, needs, phase))
            offered = [cs for cs in offered if not cs.sig.in_paste]
        cut = [cs for cs in offered if cs.sig.cut]
        if cut:
            # decided at the end, once the paste has shown whether an error line follows
            self._cut.append((line, cut, phase))
            offered = [cs for cs in offered if not cs.sig.cut]
        if phase is None and any(cs.sig.phases or cs.sig.fallback for cs in offered):
            # The phase may show below the line (an error printed before its traceback) or
            # elsewhere in the paste: the phase-bound and fallback signatures wait for the end.
            waiting = [cs for cs in offered if cs.sig.phases or cs.sig.fallback]
            if len(self._deferred) < MAX_DEFERRED:
                self._deferred.append((line, waiting))
            offered = [cs for cs in offered if not (cs.sig.phases or cs.sig.fallback)]
        self._match(offered, line, phase)

    def fold(self) -> Fold:
        return self.compiled.fold

    def _match(self, offered: list[CompiledSignature], line: Line, phase: str | None) -> None:
        matched = [(cs, place) for cs in offered
                   if (place := self._applies(cs, line.text, line.no, phase)) is not None]
        # a person's words about speed explain no failure: "it OOMs with vLLM; without it
        # training works, but slowly" still says OOM
        problems = self.compiled.kb.problems
        if any(not (cs.sig.fallback or cs.of_cause)
               and (cs.sig.kind != "prose" or problems[cs.owner].failure) for cs, _ in matched):
            self._explained.add(line.no)
        if line.no in self._explained:
            matched = [(cs, place) for cs, place in matched if not cs.sig.fallback]
        for cs, place in matched:
            self._record(cs, line, phase, place)

    def _applies(self, cs: CompiledSignature, text: str, line_no: int, phase: str | None
                 ) -> _Place | None:
        """Where the signature matches this line, or None when it does not apply here."""
        if cs.sig.phases and phase not in cs.sig.phases:
            return None
        m = cs.regex.search(text)
        if m is None:
            return None
        near = NO_PLACE
        if cs.with_any:
            if cs.sig.kind != "prose":
                if not any(p.search(text) for p in cs.with_any):
                    return None
            else:  # a person's words: which placed the report, and how near they stand
                near = _nearest(m, cs.with_any, text)
                if near == NO_PLACE:
                    return None
        place = _Place(m.start(), near)
        ctx = cs.sig.context
        if ctx is None:
            return place
        lo = line_no - ctx.within
        if cs.ctx_any and not any(self._ctx_last[i] >= lo for i in cs.ctx_any):
            return None
        return None if any(self._ctx_last[i] >= lo for i in cs.ctx_none) else place

    def _record(self, cs: CompiledSignature, line: Line, phase: str | None, place: _Place
                ) -> None:
        kind = cs.sig.kind
        if kind != "prose" and is_prose(line.text):
            # a message quoted inside someone's sentence is their report of it, not the log
            kind = "prose"
        elif kind == "error" and (level := _LOW_LEVEL.search(line.text)) and level["low"]:
            kind = "warning"
        hit = SignatureHit(line.no, line.text, kind, phase, place.at)
        seen = self.hits.setdefault(cs.sig.id, [])
        if len(seen) < 2:
            seen.append(hit)
        else:
            seen[-1] = hit
        if cs.of_cause:
            return
        hits = self._hits.setdefault(cs.owner, _ProblemHits())
        hits.error_message = hits.error_message or cs.sig.kind == "error"
        rank = KIND_RANK[kind]
        hits.count += 1
        if (rank, cs.sig.weight) > (hits.best_kind, hits.best_weight):
            hits.best_kind, hits.best_weight = rank, cs.sig.weight
            hits.nearest = NO_PLACE
        if rank == hits.best_kind:
            if line.no > hits.last_line:
                hits.nearest = NO_PLACE
            hits.last_line = max(hits.last_line, line.no)
            hits.phase = phase
            if cs.sig.weight == hits.best_weight and line.no == hits.last_line:
                hits.nearest = min(hits.nearest, place.near)
        if cs.sig.id not in hits.signature_ids:
            hits.signature_ids.append(cs.sig.id)
        # keep the first line and the latest ones: the first shows where it began, the
        # latest what finally failed
        entry = (line.no, line.text)
        if len(hits.lines) < MAX_EVIDENCE:
            hits.lines.append(entry)
        elif entry[0] != hits.lines[-1][0]:
            hits.lines = [hits.lines[0], *hits.lines[2:], entry]

    def finish(self, sink: FactSink) -> None:
        """Place the lines whose phase was unknown when they were read: by the frames just
        below them, else by any frames in the paste, else by where the log got to (a
        milestone printed after the line), else by what the user said."""
        deferred, self._deferred = self._deferred, []
        for line, waiting in deferred:
            phase = (self.phase.phase_after(line.text, line.no) or self.phase.any_phase()
                     or self.phase.last_milestone() or self.phase.said_phase())
            self._match(waiting, line, phase)
        needs, self._needs = list(self._needs), deque(maxlen=MAX_DEFERRED)
        for line, waiting, phase in needs:
            found = [cs for cs in waiting if self._seen_literals.intersection(cs.sig.in_paste)]
            if found:
                self._match(found, line, phase)
        cut, self._cut = list(self._cut), deque(maxlen=MAX_DEFERRED)
        logged = any(h.best_kind >= KIND_RANK["warning"] for h in self._hits.values())
        if not (logged or self._exception_shown):
            # the paste ends inside a traceback: its frames are all there is to read, and the
            # innermost one says where it stopped. A traceback whose innermost reading is not
            # about memory (ranks waiting in a collective) is that failure, and so is one the
            # user names in words ("fails due to a NCCL error: invalid usage"): the memory
            # readings of the frames that led there (the profile run's) are set aside.
            problems = self.compiled.kb.problems
            read = [(line, phase, found) for line, waiting, phase in cut
                    if (found := [cs for cs in waiting if self._applies(
                        cs, line.text, line.no, phase) is not None])]
            if read and (any(not cs.of_cause and not problems[cs.owner].memory_problem
                             for cs in read[-1][2]) or self._other_failure_named()):
                read = [(line, phase, kept) for line, phase, found in read
                        if (kept := [cs for cs in found if cs.of_cause
                                     or not problems[cs.owner].memory_problem])]
            for line, phase, found in read:
                self._match(found, line, phase)

    def renumber(self, raw_line: Callable[[int], int]) -> None:
        """Report lines by their number in the input as sent (a paste's logical lines were
        scanned; `raw_line` maps one to where it began)."""
        for hits in self._hits.values():
            hits.lines = [(raw_line(no), text) for no, text in hits.lines]
            hits.last_line = raw_line(hits.last_line) if hits.last_line else 0
        for sig_id, seen in self.hits.items():
            self.hits[sig_id] = [h._replace(line_no=raw_line(h.line_no)) for h in seen]

    def _other_failure_named(self) -> bool:
        """Whether the paste names a failure that is not about GPU memory: an NCCL, driver or
        hardware problem, or a cause such as the host's OOM killer or heads not divisible by
        the TP size, in a log line or in the user's words."""
        kb = self.compiled.kb
        for sig_id, seen in self.hits.items():
            owner = self._owner[sig_id]
            if owner.sig.in_paste or owner.sig.kind == "info" or all(h.kind == "info"
                                                                     for h in seen):
                # a reading that leans on the rest of the paste ("it hangs"), or a line the
                # program logged for information, names no failure
                continue
            if owner.of_cause:
                if not kb.causes[owner.owner].memory:
                    return True
                continue
            problem = kb.problems[owner.owner]
            if not problem.memory_problem and problem.failure:
                return True
        return False

    def _fatal_cause_named(self) -> bool:
        """Whether a log line names a cause outright as the error that ended the process
        ("OSError: [Errno 98] Address already in use"), not about GPU memory."""
        kb = self.compiled.kb
        return any(self._owner[sig_id].of_cause
                   and not kb.causes[self._owner[sig_id].owner].memory
                   and any(h.kind == "error" for h in seen)
                   for sig_id, seen in self.hits.items())

    def problems(self, redact: Callable[[str], str] | None = None) -> list[ProblemMatch]:
        ranked = sorted(self._hits.items(),
                        key=lambda kv: (kv[1].best_kind, kv[1].best_weight, kv[1].last_line,
                                        -_placed(kv[1].nearest)),
                        reverse=True)
        kb = self.compiled.kb
        if self._fatal_cause_named():
            # a warning beside the error that ended the process is not the problem
            ranked = [(pid, h) for pid, h in ranked if h.best_kind >= KIND_RANK["error"]]
        if self._other_failure_named():
            # "OOM" or "slow" in someone's words does not stand against a failure the paste
            # names that is not GPU memory
            ranked = [(pid, h) for pid, h in ranked if h.best_kind != KIND_RANK["prose"]
                      or (kb.problems[pid].failure and not kb.problems[pid].memory_problem)]
        if any(kb.problems[pid].failure and h.best_kind >= KIND_RANK["warning"]
               for pid, h in ranked):
            # a benchmark table or a sentence about speed is beside the point when the paste
            # shows the server failing
            ranked = [(pid, h) for pid, h in ranked if kb.problems[pid].failure
                      or h.best_kind >= KIND_RANK["warning"]]
        if any(kb.problems[pid].failure and h.error_message for pid, h in ranked):
            # nor is a performance warning, when the paste quotes the error that failed
            ranked = [(pid, h) for pid, h in ranked if kb.problems[pid].failure
                      or h.best_kind > KIND_RANK["warning"]]
        if self._failed:
            # nor any performance finding, when the paste shows the server failing (a
            # traceback, an exception, "failed to start") even without a known error line
            ranked = [(pid, h) for pid, h in ranked if kb.problems[pid].failure]
        prose = KIND_RANK["prose"]
        if any(kb.problems[pid].failure and kb.problems[pid].memory_problem
               and h.best_kind == prose for pid, h in ranked):
            # of a person's words, running out of memory before words about speed ("it OOMs
            # with vLLM; without it training works, but slowly")
            ranked.sort(key=lambda kv: kv[1].best_kind == prose
                        and not kb.problems[kv[0]].failure)
        out = []
        for pid, hits in ranked:
            problem = self.compiled.kb.problems[pid]
            corroboration = 0.03 * (len(hits.signature_ids) - 1)
            confidence = round(min(0.99, hits.best_weight + corroboration), 2)
            lines = [text for _, text in hits.lines]
            if redact is not None:
                lines = [redact(t) for t in lines]
            out.append(ProblemMatch(
                id=pid, title=problem.title, confidence=confidence,
                evidence=lines, line_numbers=[n for n, _ in hits.lines],
                summary=problem.short_answer.strip(), signature_ids=list(hits.signature_ids),
                phase=hits.phase, from_prose=hits.best_kind == KIND_RANK["prose"]))
        return out
