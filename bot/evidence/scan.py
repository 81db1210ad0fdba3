"""One pass over the input, offering each consumer only the lines it can use.

Most of a vLLM log is request chatter. Rather than run every pattern on every line, the scanner
searches each chunk for all the consumers' literal anchors at once (an Aho-Corasick automaton,
the multi-literal search grep uses), decodes only the lines that contain one, and hands those
lines, normalised, to the consumers in order. Memory stays flat: the input is read in fixed
chunks, and a single enormous line is seen through a window around each anchor.

A busy server's log is mostly a few repeated line shapes, each with anchors. Those families
(bot.evidence.families) are found first and folded (bot.evidence.fold): of their lines, each
consumer is offered the few that can change its reading, so the cost follows what can change
the answer rather than the number of anchored lines. With no families, every anchored line is
offered: the line-by-line reading folding is tested against.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO, Protocol

from ahocorasick_rs import Implementation

from bot.evidence.automata import automaton
from bot.evidence.base import FactSink, Line
from bot.evidence.families import FAMILIES, Family
from bot.evidence.fold import Folder
from bot.evidence.text import MAX_LINE_CHARS, normalize_line
from bot.structs import struct

CHUNK = 4 * 1024 * 1024
SNIFF = 64 * 1024


class Consumer(Protocol):
    # Read-only: extractors declare these as class attributes (ClassVar), which a settable
    # protocol attribute would reject.
    @property
    def anchors(self) -> tuple[str, ...]: ...

    @property
    def follow(self) -> int: ...

    def feed(self, line: Line, sink: FactSink) -> None: ...

    def finish(self, sink: FactSink) -> None: ...


def folded_anchors(consumer: Consumer) -> tuple[str, ...]:
    """Lower-case anchors a consumer wants found in any casing (case-insensitive signatures);
    most consumers have none."""
    return tuple(getattr(consumer, "folded_anchors", ()))


@struct
class ScanStats:
    """Size and shape of the input, reported with the diagnosis (bytes, lines, binary, overlong
    lines)."""
    bytes: int = 0
    lines: int = 0
    binary: bool = False
    long_lines: int = 0


_CONTROL = bytes(b for b in range(0x20) if b not in (9, 10, 13, 27))


def looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    control = len(head) - len(head.translate(None, _CONTROL))
    return (len(head) - control) / len(head) < 0.85


class Scanner:
    """Feeds `consumers` from a byte stream. Reusable: build once per KB, call `scan` per input."""

    def __init__(self, consumers: Sequence[Consumer], large: bool = True,
                 families: Sequence[Family] = FAMILIES) -> None:
        """`large`: the input may be a whole log. Its automaton (a DFA) takes tens of ms to
        build and scans hundreds of MB/s; a paste is read faster with one that builds in ~2 ms.
        `families`: the line families to fold; () offers every anchored line."""
        self.consumers = list(consumers)
        folded = [folded_anchors(c) for c in self.consumers]
        self._anchors = _Anchors([c.anchors for c in self.consumers], folded,
                                 Implementation.DFA if large else Implementation.ContiguousNFA)
        self._follow = [c.follow for c in self.consumers]
        self._folder = (Folder(families, self.consumers, folded, self._anchors.line)
                        if families else None)

    def scan(self, stream: BinaryIO | bytes | str, sink: FactSink, limit: int | None = None
             ) -> ScanStats:
        if isinstance(stream, str):
            stream = io.BytesIO(stream.encode("utf-8", "surrogateescape"))
        elif isinstance(stream, bytes | bytearray):
            stream = io.BytesIO(bytes(stream))
        stats = ScanStats()
        follow_left = [0] * len(self.consumers)
        line_no = 1
        last = b"\n"
        with _no_cycle_collection():
            for chunk in _chunks(stream, limit):
                if not stats.bytes:
                    stats.binary = looks_binary(chunk[:SNIFF])
                stats.bytes += len(chunk)
                last = chunk[-1:]
                line_no = self._scan_chunk(chunk, line_no, sink, follow_left, stats)
        stats.lines = line_no - 1 if last == b"\n" else line_no
        for consumer in self.consumers:
            consumer.finish(sink)
        return stats

    def _scan_chunk(self, chunk: bytes, line_no: int, sink: FactSink, follow_left: list[int],
                    stats: ScanStats) -> int:
        # 1. every line with an anchor -> which consumers want it, and where each one's anchor
        #    is (an over-long line is seen through a window around that position)
        starts: dict[int, dict[int, int]] = {}
        found = self._folder.find(chunk) if self._folder is not None else None
        if found is None:
            self._anchors.lines(chunk, starts)
        else:
            # the anchor search reads the lines outside the families; then the folder adds
            # the family lines each consumer is offered
            assert self._folder is not None
            self._anchors.lines(found.rest, starts, found.where)
            self._folder.offer(chunk, found, starts)
        # 2. lines owed to consumers that asked to follow an anchor line (tables)
        extra: set[int] = set()
        for ls, wanted_by in starts.items():
            n = max(self._follow[i] for i in wanted_by)
            if n:
                nl = chunk.find(b"\n", ls)
                if nl != -1:
                    extra.update(_line_starts(chunk, nl + 1, n))
        if any(follow_left):
            # Lines at the top of this chunk continue a table that began in the previous one.
            extra.update(_line_starts(chunk, 0, max(follow_left)))
        offsets = sorted(set(starts) | extra) if extra else sorted(starts)
        prev = 0
        for ls in offsets:
            line_no += chunk.count(b"\n", prev, ls)
            prev = ls
            le = chunk.find(b"\n", ls)
            if le == -1:
                le = len(chunk)
            entry = starts.get(ls, {})
            wanted: set[int] = set(entry)
            for i, left in enumerate(follow_left):
                if left > 0:
                    wanted.add(i)
            if not wanted:
                continue
            long_line = le - ls > MAX_LINE_CHARS
            stats.long_lines += int(long_line)
            lines: dict[int, Line] = {}
            for i in sorted(wanted):
                lo = 0
                if long_line:
                    at = entry[i] - ls if i in entry else 0
                    lo = max(0, min(at - MAX_LINE_CHARS // 2, le - ls - MAX_LINE_CHARS))
                line = lines.get(lo)
                if line is None:
                    raw = chunk[ls + lo : min(le, ls + lo + MAX_LINE_CHARS)]
                    line = lines[lo] = Line(line_no, normalize_line(raw.decode("utf-8", "replace")))
                in_follow = follow_left[i] > 0
                has_anchor = i in entry
                self.consumers[i].feed(line, sink)
                if has_anchor:
                    follow_left[i] = self._follow[i]
                elif in_follow:
                    follow_left[i] -= 1
        line_no += chunk.count(b"\n", prev)
        return line_no




class _Anchors:
    """Every consumer's anchors, searched together with one automaton.

    One pass over the lower-cased chunk finds the lines that may hold one (every anchor is
    searched lower-cased: ASCII lower-casing keeps every byte offset, so lines line up); each
    such line is searched again, overlapping, for the consumers that own what was found: a
    case-insensitive anchor counts in any casing, an exact one only where the line holds it in
    its own casing. So each consumer gets exactly the lines that hold its own anchors, from one
    automaton rather than three.
    """

    def __init__(self, exact_of: Sequence[Sequence[str]], folded_of: Sequence[Sequence[str]],
                 implementation: Implementation) -> None:
        # lower-cased needle -> (consumer, the casing it must have, or None for any casing)
        wants: dict[bytes, set[tuple[int, bytes | None]]] = {}
        for idx, anchors in enumerate(exact_of):
            for text in anchors:
                exact = text.encode()
                wants.setdefault(exact.lower(), set()).add((idx, exact))
        for idx, anchors in enumerate(folded_of):
            for text in anchors:
                folded = text.encode()
                wants.setdefault(folded.lower(), set()).add((idx, None))
        needles = tuple(sorted(wants))
        self._wants = [sorted(wants[n], key=lambda w: (w[0], w[1] or b"")) for n in needles]
        self._find = automaton(needles, implementation == Implementation.DFA)

    def lines(self, text: bytes, starts: dict[int, dict[int, int]],
              where: Callable[[int], int] | None = None) -> None:
        """For each line of `text` that holds an anchor: the consumers that want it, and where
        each one's anchor is (`where` maps an offset in `text` to one in the chunk)."""
        lowered = text.lower()
        line_end = -1
        for _, start, _ in self._find.find_matches_as_indexes(lowered):
            if start < line_end:
                continue  # this line is done
            ls = text.rfind(b"\n", 0, start) + 1
            line_end = text.find(b"\n", start)
            if line_end == -1:
                line_end = len(text)
            found = self.line(text[ls:line_end], lowered[ls:line_end])
            if found:
                at = ls if where is None else where(ls)
                positions = starts.setdefault(at, {})
                for i, pos in found.items():
                    positions.setdefault(i, at + pos)

    def line(self, text: bytes, lowered: bytes | None = None) -> dict[int, int]:
        """The consumers whose anchors `text` (one line) holds, and where the first one is:
        an exact anchor's place before a case-insensitive one's."""
        if lowered is None:
            lowered = text.lower()
        exact: dict[int, int] = {}
        folded: dict[int, int] = {}
        for idx, start, end in self._find.find_matches_as_indexes(lowered, overlapping=True):
            for i, casing in self._wants[idx]:
                if casing is None:
                    folded.setdefault(i, start)
                elif i not in exact and text[start:end] == casing:
                    exact[i] = start
        for i, at in folded.items():
            exact.setdefault(i, at)
        return exact


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """A chunk's scan holds tens of thousands of tuples, lists and matches at once, none in a
    cycle (reference counting frees them all); the cyclic collector would walk them, and every
    other object, each time a few hundred are allocated. It waits until the scan is done."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _line_starts(chunk: bytes, start: int, count: int) -> Iterator[int]:
    """Where the next `count` lines of the chunk start; none past its end (the next chunk's
    lines are followed from its top)."""
    pos = start
    for _ in range(count):
        if pos >= len(chunk):
            return
        yield pos
        nl = chunk.find(b"\n", pos)
        if nl == -1:
            return
        pos = nl + 1


def _chunks(stream: BinaryIO, limit: int | None) -> Iterable[bytes]:
    """Chunks that end on a line boundary; a line longer than a chunk is cut at the chunk."""
    carry = b""
    read = 0
    while True:
        want = CHUNK if limit is None else min(CHUNK, limit - read)
        block = stream.read(want) if want > 0 else b""
        read += len(block)
        if not block:
            if carry:
                yield carry
            return
        cut = block.rfind(b"\n")
        if cut == -1:
            data = carry + block
            if len(data) >= CHUNK:
                yield data
                carry = b""
            else:
                carry = data
            continue
        # one copy of the chunk at a time (memory stays flat at a few chunks)
        chunk = b"".join((carry, memoryview(block)[: cut + 1]))
        carry = block[cut + 1 :]
        del block
        yield chunk
