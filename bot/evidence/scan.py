"""One pass over the input, offering each consumer only the lines it can use.

Most of a vLLM log is request chatter. Rather than run every pattern on every line, the scanner
searches each chunk for the consumers' literal anchors with `bytes.find` (which runs at memory
speed), decodes only the lines that contain one, and hands those lines, normalised, to the
consumers in order. Memory stays flat: the input is read in fixed chunks, and a single enormous
line is seen through a window around each anchor.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from bot.evidence.base import FactSink, Line
from bot.evidence.text import MAX_LINE_CHARS, normalize_line

CHUNK = 4 * 1024 * 1024
SNIFF = 64 * 1024


class Consumer(Protocol):
    anchors: tuple[str, ...]
    follow: int

    def feed(self, line: Line, sink: FactSink) -> None: ...

    def finish(self, sink: FactSink) -> None: ...


@dataclass
class ScanStats:
    bytes: int = 0
    lines: int = 0
    binary: bool = False
    long_lines: int = 0


@dataclass
class _Anchor:
    needle: bytes
    text: str
    consumers: list[int] = field(default_factory=list)


def _looks_binary(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head:
        return True
    text_bytes = sum(1 for b in head if b >= 0x20 or b in (9, 10, 13, 27))
    return text_bytes / len(head) < 0.85


class Scanner:
    """Feeds `consumers` from a byte stream. Reusable: build once per KB, call `scan` per input."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        self.consumers = list(consumers)
        by_needle: dict[bytes, _Anchor] = {}
        for idx, consumer in enumerate(self.consumers):
            for text in consumer.anchors:
                needle = text.encode()
                anchor = by_needle.setdefault(needle, _Anchor(needle, text))
                if idx not in anchor.consumers:
                    anchor.consumers.append(idx)
        # An anchor that contains another anchor of the same consumers adds no candidate line
        # the shorter one does not find; dropping it saves one pass over every chunk.
        needles = sorted(by_needle.values(), key=lambda a: len(a.needle))
        kept: list[_Anchor] = []
        for anchor in needles:
            if any(k.needle in anchor.needle and set(anchor.consumers) <= set(k.consumers)
                   for k in kept):
                continue
            kept.append(anchor)
        self._search = kept
        self._follow = [c.follow for c in self.consumers]

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
        for chunk in _chunks(stream, limit):
            if not stats.bytes:
                stats.binary = _looks_binary(chunk[:SNIFF])
            stats.bytes += len(chunk)
            last = chunk[-1:]
            line_no = self._scan_chunk(chunk, line_no, sink, follow_left, stats)
        stats.lines = line_no - 1 if last == b"\n" else line_no
        for consumer in self.consumers:
            consumer.finish(sink)
        return stats

    def _scan_chunk(self, chunk: bytes, line_no: int, sink: FactSink, follow_left: list[int],
                    stats: ScanStats) -> int:
        # 1. every anchor occurrence -> the line it sits in, and which consumers want it
        starts: dict[int, tuple[int, int, set[int]]] = {}
        for anchor in self._search:
            pos = chunk.find(anchor.needle)
            while pos != -1:
                ls = chunk.rfind(b"\n", 0, pos) + 1
                entry = starts.get(ls)
                if entry is None:
                    starts[ls] = (pos, ls, set(anchor.consumers))
                else:
                    entry[2].update(anchor.consumers)
                le = chunk.find(b"\n", pos)
                pos = chunk.find(anchor.needle, le) if le != -1 else -1
        # 2. lines owed to consumers that asked to follow an anchor line (tables)
        extra: set[int] = set()
        for ls, (_, _, wanted_by) in starts.items():
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
            entry = starts.get(ls)
            wanted: set[int] = set(entry[2]) if entry else set()
            for i, left in enumerate(follow_left):
                if left > 0:
                    wanted.add(i)
            if not wanted:
                continue
            raw = chunk[ls:le]
            if len(raw) > MAX_LINE_CHARS:
                stats.long_lines += 1
                at = (entry[0] - ls) if entry else 0
                lo = max(0, min(at - MAX_LINE_CHARS // 2, len(raw) - MAX_LINE_CHARS))
                raw = raw[lo : lo + MAX_LINE_CHARS]
            text = normalize_line(raw.decode("utf-8", "replace"))
            line = Line(line_no, text)
            for i in sorted(wanted):
                in_follow = follow_left[i] > 0
                has_anchor = entry is not None and i in entry[2]
                self.consumers[i].feed(line, sink)
                if has_anchor:
                    follow_left[i] = self._follow[i]
                elif in_follow:
                    follow_left[i] -= 1
        line_no += chunk.count(b"\n", prev)
        return line_no


def _line_starts(chunk: bytes, start: int, count: int) -> Iterator[int]:
    pos = start
    for _ in range(count):
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
        data = carry + block
        cut = data.rfind(b"\n")
        if cut == -1:
            if len(data) >= CHUNK:
                yield data
                carry = b""
            else:
                carry = data
            continue
        yield data[: cut + 1]
        carry = data[cut + 1 :]
