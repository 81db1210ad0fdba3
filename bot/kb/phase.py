"""Which phase of a server's life a line belongs to, read from the lines before it.

An error's phase is what an engineer reads off the traceback: the frames above "CUDA out of
memory" say whether the weights were loading, the profile run or CUDA-graph capture was
running, or requests were being served. Without frames (a bare error line), the last milestone
the log reached says it ("Loading model weights took ..." means loading is over). Nearby words
in prose do not count: only frames and milestones listed in knowledge/phases.yaml do.

Tracebacks of several processes interleave in multi-GPU logs, each line tagged with its
process (`(VllmWorker rank=1 pid=7)`, `[rank1]:`); frames are kept per tag, so one worker's
frames never decide another worker's error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import NamedTuple

from bot.kb.schema import Phase
from bot.lazyre import lazy

TRACEBACK = "Traceback (most recent call last)"
FRAME_WINDOW = 200  # lines: a traceback deeper than this is rare, and an older frame is stale
AFTER_WINDOW = 80  # lines after an error in which its own traceback, or a worker's report, shows
MAX_FRAMES_KEPT = 5000
_STREAM = lazy(
    r"(?:\([^()\n]{0,100}?(?:pid|rank)=\d{1,10}[^()\n]{0,60}\) {0,2}|\[rank\d{1,5}\]:? ?)"
    r"{1,3}")


ALSO = " && "  # "model_executor/models/ && in __init__": every part on the same line


class Marker(NamedTuple):
    rank: int  # index of the phase in knowledge/phases.yaml: lower is more specific
    frame: bool  # a frame (decides within a traceback) or a milestone (a point in the log)
    also: tuple[str, ...] = ()  # further text the line must hold (the first part is the anchor)


class PhaseMarkers:
    """The phases' literal markers, compiled once per KB."""

    def __init__(self, phases: list[Phase]) -> None:
        self.ids = tuple(p.id for p in phases)
        self.by_literal: dict[str, list[Marker]] = {}
        self.said: dict[str, int] = {}  # a person's phrase (lower case) -> its phase's rank
        for rank, phase in enumerate(phases):
            for texts, frame in ((phase.frames, True), (phase.milestones, False)):
                for text in texts:
                    anchor, *also = text.split(ALSO)
                    self.by_literal.setdefault(anchor, []).append(
                        Marker(rank, frame, tuple(also)))
            for text in phase.said:
                self.said.setdefault(text, rank)

    @property
    def literals(self) -> tuple[str, ...]:
        return (*self.by_literal, TRACEBACK)


class PhaseTracker:
    """Per-scan state: frames of the current traceback of each process, the last milestone."""

    def __init__(self, markers: PhaseMarkers) -> None:
        self.markers = markers
        self._frames: dict[str, deque[tuple[int, int]]] = {}  # stream -> (line, rank)
        # every frame seen, for errors printed before their traceback (bounded)
        self._all: deque[tuple[int, int, str]] = deque(maxlen=MAX_FRAMES_KEPT)
        self._milestone: int | None = None
        self._said: int | None = None

    def see(self, text: str, line_no: int, literals: Collection[str]) -> None:
        """Record the markers `literals` found in this line. A traceback that starts on the
        line ends the one before it, so the line's own frames ("Exception in worker ... while
        processing method init_device: ..., Traceback (most recent call last):") belong to
        the new one; the other markers count in the order they stand in the line, so of two
        milestones the later is where the log had got to."""
        stream = _stream(text)
        if TRACEBACK in literals:
            self._frames.pop(stream, None)  # a new traceback: earlier frames are another's
        for literal in sorted((lit for lit in literals if lit != TRACEBACK),
                              key=lambda lit: (text.find(lit), lit)):
            for m in self.markers.by_literal.get(literal, ()):
                if m.also and not all(a in text for a in m.also):
                    continue
                if m.frame:
                    frames = self._frames.setdefault(stream, deque())
                    frames.append((line_no, m.rank))
                    self._all.append((line_no, m.rank, stream))
                    while frames and frames[0][0] < line_no - FRAME_WINDOW:
                        frames.popleft()
                else:
                    self._milestone = m.rank

    def phase_at(self, text: str, line_no: int) -> str | None:
        """The phase of an error printed on this line (after `see` was given the line)."""
        lo = line_no - FRAME_WINDOW
        stream = _stream(text)
        ranks = [r for no, r in self._frames.get(stream, ()) if no >= lo]
        if not ranks:
            ranks = [r for frames in self._frames.values() for no, r in frames if no >= lo]
        if ranks:
            return self.markers.ids[min(ranks)]
        return None if self._milestone is None else self.markers.ids[self._milestone]


    def phase_after(self, text: str, line_no: int) -> str | None:
        """The phase shown by frames printed just after an error line: an error reported
        before its traceback ("Future exception was never retrieved", a worker's "Exception in
        worker ... while processing method load_model" below it). The same process's frames
        first, then any process's."""
        stream = _stream(text)
        near = [(r, s) for no, r, s in self._all if line_no < no <= line_no + AFTER_WINDOW]
        ranks = [r for r, s in near if s == stream] or [r for r, _ in near]
        return self.markers.ids[min(ranks)] if ranks else None

    def hear(self, phrase: str) -> None:
        """A person's sentence names a phase ("it OOMs under load"); the last one said wins,
        as a description runs in time order ("starts fine, then under load it crashes")."""
        self._said = self.markers.said[phrase]

    def said_phase(self) -> str | None:
        """The phase the user's own words place the failure in, if any."""
        return None if self._said is None else self.markers.ids[self._said]

    def last_milestone(self) -> str | None:
        """Where the log had got to when it ends: "Capturing the model for CUDA graphs" as the
        last line a server printed says capture is where it stopped."""
        return None if self._milestone is None else self.markers.ids[self._milestone]

    def any_phase(self) -> str | None:
        """The phase the paste's frames show anywhere: for a person's "it reports OOM" above
        a traceback whose error line was cut."""
        ranks = [r for _, r, _ in self._all]
        return self.markers.ids[min(ranks)] if ranks else None


def _stream(text: str) -> str:
    m = _STREAM.match(text)
    return m.group() if m else ""
