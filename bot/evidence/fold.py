"""Folding a chunk's family lines: offering each consumer only those that can change its reading.

For each family (bot.evidence.families) the scanner finds the chunk's lines by the family's key
(one automaton pass), confirms each with the family's bounded pattern, and takes them out of
the text the anchor search then reads. Of a family's lines, a consumer the constant text offers
them to (one of its anchors is in it) is offered:

- every one, if it has no fold (bot.evidence.base.Fold), or the constant text holds a literal
  its fold reads whole (a traceback frame);
- otherwise, between two lines offered for other reasons: the first and the last; the first and
  last few lines each probe matches (a probe whose gate is in the constant text runs on every
  line, one whose gate is not, on the lines that hold it); the first holding a peak's highest
  value; each line that holds a key, a whole-line literal or a milestone outside the constant
  text; and, where two families leave it different states, the latest line of each before every
  line it is offered.

A consumer the constant text does not offer them to is offered a line where one of its anchors
and something its reading depends on appear outside the constant text (a prompt naming a GPU).

The literals outside the constant text are found with one automaton pass over the family's
lines; probes run with `map` (C speed), each only on the lines holding a literal every match of
it holds (bot.evidence.literals). Python runs per offered line only. The result is what
line-by-line reading gives: tests/evidence/test_fold.py reads the shipped examples and
generated server logs both ways and compares the diagnoses.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import field
from itertools import accumulate, chain, compress, pairwise, repeat
from operator import add, itemgetter, methodcaller, not_, sub
from typing import Any, NamedTuple, Protocol

from ahocorasick_rs import BytesAhoCorasick, Implementation, MatchKind

from bot.evidence.automata import automaton
from bot.evidence.base import Fold, Probe
from bot.evidence.families import Family
from bot.evidence.literals import literal_prefix, required_literals
from bot.evidence.text import MAX_LINE_CHARS
from bot.evidence.units import convert
from bot.structs import struct

# What makes normalize_line change a line: such a line is read one by one. The single bytes
# are looked for in the chunk (memchr); the others are needles of the key automaton (which
# single-byte needles would slow fivefold).
_RAW_BYTES = (b"\r", b"\x1b", b"&")
_RAW = (b"[0m", b"```")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_LOWEST = float("-inf")  # a peak group that took no part in a match
# After this much of a family's text, its literals are worth a DFA (~10 ms to build).
_DFA_AFTER = 4 << 20


class Reader(Protocol):
    """What the folder needs of a scanner consumer (`fold` is optional)."""

    @property
    def anchors(self) -> tuple[str, ...]: ...

    @property
    def follow(self) -> int: ...


@struct
class Found:
    """The family lines of one chunk, and the text the anchor search reads instead."""

    starts: list[list[int]]  # per family: where each of its lines starts and ends
    ends: list[list[int]]
    rest: bytes  # the chunk without them: whole lines, so line numbers still count
    _rest_at: list[int]  # where each piece of `rest` begins, in `rest` and in the chunk
    _chunk_at: list[int]

    def where(self, offset: int) -> int:
        """The chunk offset of `offset` in `rest`."""
        i = bisect_right(self._rest_at, offset) - 1
        return self._chunk_at[i] + offset - self._rest_at[i]


class _Act(NamedTuple):
    """What finding a literal outside the constant text does to a line."""

    consumer: int
    force: bool  # the line is offered to every consumer folding the family
    probe: Probe | None = None  # the line counts for this gated probe (or offers `consumer`
    # only where it matches)
    marks: bool = False  # the literal leaves the consumer a state (a milestone)


class _Needled:
    """Needles, and which of them each line of a text holds.

    A non-overlapping pass (the automaton's fast, prefiltered path) finds the lines that hold
    any; an overlapping pass over each of those lines alone lists all it holds (a needle
    hidden under another's match is in the same line: no needle spans a newline).
    """

    def __init__(self, needles: tuple[bytes, ...]) -> None:
        self.needles = needles
        self._all = BytesAhoCorasick(list(needles))
        self._find = automaton(needles, dfa=False)
        self._scanned = 0  # in this process: past _DFA_AFTER, a DFA is worth its building

    def lines(self, text: bytes, offsets: list[int]) -> dict[int, set[int]]:
        """Line index (`offsets`: where each line of `text` starts) -> the needles it holds."""
        self._scanned += len(text)
        if self._scanned > _DFA_AFTER and self._scanned - len(text) <= _DFA_AFTER:
            self._find = automaton(self.needles, dfa=True)
        found: dict[int, set[int]] = {}
        done = -1
        for _, at, _ in self._find.find_matches_as_indexes(text):
            if at < done:
                continue
            k = bisect_right(offsets, at) - 1
            done = offsets[k + 1]
            line = text[offsets[k]:done - 1]
            found[k] = {idx for idx, _, _ in self._all.find_matches_as_indexes(
                line, overlapping=True)}
        return found


@struct
class _Literals:
    """A family's literals outside its constant text, looked for in its lower-cased lines; a
    literal that is not case-insensitive is then checked in the line's own casing."""

    needled: _Needled
    entries: list[tuple[tuple[bytes, bool, tuple[_Act, ...]], ...]]  # (literal, exact, acts)


@struct
class _Plan:
    """How one family's lines are offered (computed once per scan, on its first line)."""

    every: tuple[int, ...]  # consumers offered each line, reading each one
    folding: tuple[int, ...]  # consumers offered each line, folding them
    probes: tuple[Probe, ...]  # gated by the constant text: run on every line that may match
    states: dict[int, Hashable]  # consumer -> the state the family's lines leave it
    literals: _Literals | None = None
    # the literals one of which every match of a probe holds: (needles, per needle: the
    # probes, searched in the lower-cased lines); a probe in none runs on every line
    prefilters: tuple[tuple[_Needled, list[tuple[int, ...]], bool], ...] = ()


@struct
class _Selection:
    """Which lines of a chunk each folded family must still read one by one."""
    lines: list[set[int]] = field(default_factory=list)  # per family: offered to `folding`
    extra: dict[int, dict[int, int]] = field(default_factory=dict)  # line start -> consumers
    marked: set[int] = field(default_factory=set)  # consumers a line left a state of its own


_PLANS: dict[tuple[Family, tuple[int, ...]], tuple[_Plan, object]] = {}
_KEPT_PLANS = 64


class Folder:
    """Finds and folds the family lines of chunks for a scanner's consumers."""

    def __init__(self, families: Sequence[Family], consumers: Sequence[Reader],
                 folded_anchors: Sequence[tuple[str, ...]],
                 offered: Callable[[bytes], dict[int, int]]) -> None:
        """`offered(line)`: the consumers an anchor in `line` offers it to, and where that
        anchor is, as the scanner computes it."""
        self.families = list(families)
        self.consumers = list(consumers)
        self._folded_anchors = list(folded_anchors)
        self._offered = offered
        self._folds: list[Fold | None] = [_fold_of(c) for c in self.consumers]
        keys = sorted({f.key.encode() for f in self.families})
        self._by_key = [[i for i, f in enumerate(self.families) if f.key.encode() == k]
                        for k in keys]
        self._raw = len(keys)  # needles from here on are _RAW
        # few needles, one match per family line
        self._keys = BytesAhoCorasick([*keys, *_RAW], matchkind=MatchKind.LeftmostLongest,
                                      implementation=Implementation.DFA)
        self._plans: dict[int, _Plan] = {}

    # -- finding -------------------------------------------------------------------------------
    def find(self, chunk: bytes) -> Found | None:
        """The chunk's family lines. Each step maps a C call over all candidate lines, so that
        Python does not loop over lines: where each key is, its line's bounds, the family
        pattern's verdict."""
        hits = sorted(self._keys.find_matches_as_indexes(chunk))  # by key, then position
        if not hits:
            return None
        keys = list(map(_FIRST, hits))
        raw = list(map(_SECOND, hits[bisect_left(keys, self._raw):]))
        raw_bytes = [b for b in _RAW_BYTES if b in chunk]
        n = len(chunk)
        starts: list[list[int]] = [[] for _ in self.families]
        ends: list[list[int]] = [[] for _ in self.families]
        for key, fis in enumerate(self._by_key):
            lo, hi = bisect_left(keys, key), bisect_left(keys, key + 1)
            if lo == hi:
                continue
            at = list(map(_SECOND, hits[lo:hi]))
            ls = list(map(add, map(chunk.rfind, repeat(b"\n"), repeat(0), at), repeat(1)))
            le = list(map(chunk.find, repeat(b"\n"), at))
            if le[-1] == -1:
                le[-1] = n  # the chunk's last line, without its newline
            if max(map(sub, le, ls)) > MAX_LINE_CHARS or raw or raw_bytes:
                keep = [b - a <= MAX_LINE_CHARS and not _raw_in(chunk, a, b, raw, raw_bytes)
                        for a, b in zip(ls, le, strict=True)]
                ls, le = list(compress(ls, keep)), list(compress(le, keep))
            for fi in fis:
                verdicts = list(map(self.families[fi].head.match, repeat(chunk), ls, le))
                starts[fi] += compress(ls, verdicts)
                ends[fi] += compress(le, verdicts)
                if len(fis) > 1:
                    left = list(map(not_, verdicts))
                    ls, le = list(compress(ls, left)), list(compress(le, left))
        total = sum(map(len, starts))
        if not total:
            return None
        if len(set(chain.from_iterable(starts))) < total:
            starts, ends = _one_family_per_line(starts, ends)
        ordered = sorted(zip(chain.from_iterable(starts), chain.from_iterable(ends),
                             strict=True))
        # the rest: every piece of the chunk between two family lines (and their newlines)
        begins = [0, *map(add, map(_SECOND, ordered), repeat(1))]
        pieces = list(map(chunk.__getitem__, map(slice, begins, [*map(_FIRST, ordered), n])))
        rest_at = list(accumulate(map(len, pieces), initial=0))[:-1]
        return Found(starts, ends, b"".join(pieces), rest_at, begins)

    # -- offering ------------------------------------------------------------------------------
    def offer(self, chunk: bytes, found: Found, starts: dict[int, dict[int, int]]) -> None:
        """Add to `starts` (line start -> consumer -> anchor position: the lines the anchor
        search found outside the families) the family lines each consumer is offered."""
        delimiters = sorted(starts)
        selection = _Selection()
        line_starts = found.starts
        for fi, (fs, fe) in enumerate(zip(found.starts, found.ends, strict=True)):
            selection.lines.append(set())
            if fs:
                self._select(fi, chunk, fs, fe, delimiters, selection)
        self._carry_states(line_starts, delimiters, selection)
        for fi, picked in enumerate(selection.lines):
            if not picked:
                continue
            fs = line_starts[fi]
            folding = self._plans[fi].folding
            for k in picked:
                entry = starts.setdefault(fs[k], {})
                for c in folding:
                    entry.setdefault(c, fs[k])
        for ls, extra in selection.extra.items():
            entry = starts.setdefault(ls, {})
            for c, at in extra.items():
                entry.setdefault(c, at)

    def _select(self, fi: int, chunk: bytes, fs: list[int], fe: list[int],
                delimiters: list[int], selection: _Selection) -> None:
        plan = self._plan(fi)
        picked = selection.lines[fi]
        for c in plan.every:
            for ls in fs:
                selection.extra.setdefault(ls, {})[c] = ls
        # segments: the family's lines between two lines offered for other reasons
        bounds = [0, *(bisect_left(fs, d) for d in delimiters), len(fs)]
        segments = [(a, b) for a, b in pairwise(bounds) if a < b]
        if plan.folding:
            for a, b in segments:
                picked.update((a, b - 1))
        # views, not copies: the joined text is the one copy
        lines = list(map(memoryview(chunk).__getitem__, map(slice, fs, fe)))
        joined = b"\n".join(lines)
        # one decode for all (an invalid sequence never spans a newline)
        texts = joined.decode("utf-8", "replace").split("\n") if plan.probes else []
        offsets = list(accumulate(map(add, map(len, lines), repeat(1)), initial=0))
        lowered: list[bytes] = []
        where: dict[int, set[int]] = {}  # probe -> the lines that may hold a match
        for needled, probes_of, lower in plan.prefilters:
            for pi in {pi for ps in probes_of for pi in ps}:
                where.setdefault(pi, set())
            if lower and not joined.isascii():
                for pi in {pi for ps in probes_of for pi in ps}:
                    del where[pi]  # re's case folding reaches beyond ASCII: run everywhere
                continue
            held = needled.lines(_lower(joined, lowered) if lower else joined, offsets)
            for k, idxs in held.items():
                for idx in idxs:
                    for pi in probes_of[idx]:
                        where[pi].add(k)
        for pi, probe in enumerate(plan.probes):
            ks: Sequence[int] = sorted(where[pi]) if pi in where else range(len(texts))
            candidates = list(map(texts.__getitem__, ks)) if pi in where else texts
            matches = list(map(probe.pattern.compiled.search, candidates))
            _pick(probe, list(compress(ks, matches)), list(filter(None, matches)), segments,
                  picked)
        if plan.literals is not None:
            self._incidental(plan.literals, lines, _lower(joined, lowered), offsets, texts, fs,
                             segments, selection, picked)

    def _incidental(self, literals: _Literals, lines: list[memoryview], lowered: bytes,
                    offsets: list[int], texts: list[str], fs: list[int],
                    segments: Sequence[tuple[int, int]], selection: _Selection,
                    picked: set[int]) -> None:
        """The lines holding a literal outside the constant text, and what each one does."""
        per_line = literals.needled.lines(lowered, offsets)
        gated: dict[Probe, tuple[list[int], list[Any]]] = {}
        for k in sorted(per_line):
            raw = bytes(lines[k])
            acts = {act for idx in per_line[k] for literal, exact, owned in literals.entries[idx]
                    if not exact or literal in raw for act in owned}
            if not acts:
                continue
            text = texts[k] if texts else raw.decode("utf-8", "replace")
            found = {p: _search(p, text, raw) for p in {a.probe for a in acts} if p is not None}
            offers: set[int] = set()
            for act in acts:
                m = None if act.probe is None else found[act.probe]
                if act.force and act.probe is None:
                    picked.add(k)
                    if act.marks:
                        selection.marked.add(act.consumer)
                elif act.force and m is not None:
                    hits, matches = gated.setdefault(act.probe, ([], []))  # type: ignore[arg-type]
                    if not hits or hits[-1] != k:
                        hits.append(k)
                        matches.append(m)
                elif not act.force and (act.probe is None or m is not None):
                    offers.add(act.consumer)
            if offers:
                anchored = self._offered(raw)
                for c in offers & anchored.keys():
                    selection.extra.setdefault(fs[k], {})[c] = fs[k] + anchored[c]
        for probe, (hits, matches) in gated.items():
            _pick(probe, hits, matches, segments, picked)

    def _carry_states(self, line_starts: list[list[int]], delimiters: list[int],
                      selection: _Selection) -> None:
        """Where two families leave a consumer different states (two phase milestones), or a
        line left one of its own (a milestone in a prompt), each line offered to it is preceded
        by the latest line of each family with a state since the last delimiter, so that it
        reads the state line-by-line reading leaves."""
        by_consumer: dict[int, dict[int, Hashable]] = {}
        for fi, plan in self._plans.items():
            if line_starts[fi]:
                for c, state in plan.states.items():
                    by_consumer.setdefault(c, {})[fi] = state
        for c, states in by_consumer.items():
            if len(set(states.values())) < 2 and c not in selection.marked:
                continue
            read = {line_starts[fi][k] for fi, picked in enumerate(selection.lines)
                    if fi in self._plans and c in self._plans[fi].folding for k in picked}
            read.update(ls for ls, entry in selection.extra.items() if c in entry)
            for ls in sorted(read):
                d = bisect_left(delimiters, ls)
                since = delimiters[d - 1] if d else -1
                for fi in states:
                    fs = line_starts[fi]
                    k = bisect_left(fs, ls) - 1
                    if k >= 0 and fs[k] > since:
                        selection.lines[fi].add(k)

    # -- planning ------------------------------------------------------------------------------
    def _plan(self, fi: int) -> _Plan:
        plan = self._plans.get(fi)
        if plan is None:
            # What a plan reads (the family, each consumer's anchors and fold) is the same for
            # every scan with the same consumers' kinds and KB: kept for the process, with the
            # objects themselves, so that their ids stay theirs.
            readers = tuple((c.anchors, f, self._folds[c_i])
                            for c_i, (c, f) in enumerate(zip(self.consumers,
                                                             self._folded_anchors,
                                                             strict=True)))
            key = (self.families[fi], tuple(id(x) for r in readers for x in r))
            kept = _PLANS.get(key)
            if kept is None:
                if len(_PLANS) >= _KEPT_PLANS:
                    _PLANS.clear()
                kept = _PLANS[key] = (self._make_plan(self.families[fi]), readers)
            plan = self._plans[fi] = kept[0]
        return plan

    def _make_plan(self, family: Family) -> _Plan:
        constant = family.constant
        lowered = constant.lower()
        every: list[int] = []
        folding: list[int] = []
        probes: dict[Probe, None] = {}
        states: dict[int, Hashable] = {}
        table: dict[tuple[str, bool], set[_Act]] = {}  # (literal, case-insensitive) -> acts
        for c, consumer in enumerate(self.consumers):
            offered = any(a in constant for a in consumer.anchors) or any(
                a in lowered for a in self._folded_anchors[c])
            fold = self._folds[c]
            if fold is None:
                if offered:
                    every.append(c)
                else:
                    for a in consumer.anchors:
                        table.setdefault((a, False), set()).add(_Act(c, force=False))
                    for a in self._folded_anchors[c]:
                        table.setdefault((a, True), set()).add(_Act(c, force=False))
                continue
            marked = {state for literal, state in fold.marks if literal in constant}
            if offered and (len(marked) > 1 or any(w in constant for w in fold.whole)
                            or any(w in lowered for w in fold.whole_any_case)):
                every.append(c)  # a literal in every line makes each one read whole
                continue
            if offered:
                folding.append(c)
                probes.update((p, None) for literal, p in fold.gates if literal in constant)
                if marked:
                    states[c] = next(iter(marked))
            for literal, probe in fold.gates:
                if literal not in constant and (not offered or probe not in probes):
                    table.setdefault((literal, False), set()).add(_Act(c, offered, probe))
            for literal in (*fold.keys, *fold.whole):
                if literal not in constant:
                    table.setdefault((literal, False), set()).add(_Act(c, offered))
            for literal, _ in fold.marks:
                if literal not in constant:
                    table.setdefault((literal, False), set()).add(_Act(c, offered, marks=True))
            for literal in fold.whole_any_case:
                if literal not in lowered:
                    table.setdefault((literal, True), set()).add(_Act(c, offered))
        return _Plan(tuple(every), tuple(folding), tuple(probes), states,
                     _literals(table), _prefilters(tuple(probes), constant))


def _one_family_per_line(starts: list[list[int]], ends: list[list[int]]
                         ) -> tuple[list[list[int]], list[list[int]]]:
    """A line two keys confirmed for two families is kept in the first one (either reading
    is the line's; one is needed)."""
    owner: dict[int, int] = {}
    for fi, fs in enumerate(starts):
        for ls in fs:
            owner.setdefault(ls, fi)
    kept = [[k for k, ls in enumerate(fs) if owner[ls] == fi] for fi, fs in enumerate(starts)]
    return ([[starts[fi][k] for k in ks] for fi, ks in enumerate(kept)],
            [[ends[fi][k] for k in ks] for fi, ks in enumerate(kept)])


def _raw_in(chunk: bytes, ls: int, le: int, raw: list[int], raw_bytes: list[bytes]) -> bool:
    return bisect_left(raw, ls) < bisect_left(raw, le) or any(
        chunk.find(b, ls, le) != -1 for b in raw_bytes)


def _fold_of(consumer: Reader) -> Fold | None:
    fold = getattr(consumer, "fold", None)
    if fold is None or consumer.follow:
        return None  # a consumer that follows an anchor over lines reads each line
    result = fold()
    return result if isinstance(result, Fold) else None


_NEEDS: dict[Probe, tuple[frozenset[str], bool, BytesAhoCorasick] | None] = {}


def _needs(probe: Probe) -> tuple[frozenset[str], bool, BytesAhoCorasick] | None:
    """The literals one of which every match of `probe` holds (bot.evidence.literals), whether
    they are looked for in the lower-cased line, and a finder of them; None where the probe
    may match any line."""
    if probe not in _NEEDS:
        needs = required_literals(probe.pattern.pattern, probe.pattern.flags)
        lower = bool(probe.pattern.compiled.flags & re.IGNORECASE)
        _NEEDS[probe] = None if needs is None else (
            needs, lower, BytesAhoCorasick([n.encode() for n in sorted(needs)]))
    return _NEEDS[probe]


def _prefilters(probes: tuple[Probe, ...], constant: str
                ) -> tuple[tuple[_Needled, list[tuple[int, ...]], bool], ...]:
    """Finders of the literals of the probes `re` cannot search fast (no literal to start
    with) whose matches need one the constant text lacks."""
    tables: dict[bool, dict[bytes, list[int]]] = {False: {}, True: {}}
    for pi, probe in enumerate(probes):
        needs = _needs(probe)
        if needs is None or literal_prefix(probe.pattern.pattern, probe.pattern.compiled.flags):
            continue
        literals, lower, _ = needs
        text = constant.lower() if lower else constant
        if any(n in text for n in literals):
            continue
        for n in literals:
            tables[lower].setdefault(n.encode(), []).append(pi)
    return tuple((_Needled(tuple(sorted(table))), [tuple(table[k]) for k in sorted(table)],
                  lower) for lower, table in tables.items() if table)


def _lower(joined: bytes, cache: list[bytes]) -> bytes:
    """`joined` lower-cased, once."""
    if not cache:
        cache.append(joined.lower())
    return cache[0]


def _literals(table: dict[tuple[str, bool], set[_Act]]) -> _Literals | None:
    by_needle: dict[bytes, list[tuple[bytes, bool, tuple[_Act, ...]]]] = {}
    for (literal, folded), acts in table.items():
        if literal:
            encoded = literal.encode()
            by_needle.setdefault(encoded.lower(), []).append((encoded, not folded,
                                                              tuple(acts)))
    if not by_needle:
        return None
    needles = tuple(sorted(by_needle))
    return _Literals(_Needled(needles), [tuple(by_needle[n]) for n in needles])


def _search(probe: Probe, text: str, raw: bytes) -> Any:
    """The probe's match in one line, its literals looked for first."""
    needs = _needs(probe)
    if needs is not None:
        _, lower, finder = needs
        unsure = lower and not raw.isascii()  # re's case folding reaches beyond ASCII
        if not unsure and not finder.find_matches_as_indexes(raw.lower() if lower else raw):
            return None
    m = probe.pattern.search(text)
    return m if m is not None and (probe.check is None or probe.check(m)) else None


def _value(name: str, raw: str | None) -> Any:
    """A peak group's value as the sink keeps it; _LOWEST where there is none."""
    value = None if raw is None else convert(name, raw)
    return _LOWEST if value is None else value


def _pick(probe: Probe, hits: list[int], matches: list[Any],
          segments: Sequence[tuple[int, int]], picked: set[int]) -> None:
    """Of the lines `probe` matches (`hits`, ascending, with their `matches`), those each
    segment must offer: the first few, the last few, the first holding each group's peak."""
    if probe.check is not None:
        kept = [j for j, m in enumerate(matches) if probe.check(m)]
        hits, matches = [hits[j] for j in kept], [matches[j] for j in kept]
    if not hits:
        return
    peaks: list[list[Any]] = []
    if probe.peak:
        for name in probe.pattern.groupindex:
            raw = map(methodcaller("group", name), matches)
            peaks.append([_value(name, v) for v in raw])
    for a, b in segments:
        lo, hi = bisect_left(hits, a), bisect_left(hits, b)
        if lo == hi:
            continue
        picked.update(hits[lo:min(hi, lo + probe.first)])
        picked.update(hits[max(lo, hi - probe.last):hi])
        for values in peaks:
            at = max(range(lo, hi), key=values.__getitem__)  # the first of the highest
            if values[at] is not _LOWEST:
                picked.add(hits[at])
