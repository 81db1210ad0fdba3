"""The one interface every source of evidence implements, and the sink facts are written to.

An extractor names the literal `anchors` its lines contain; the scanner (bot.evidence.scan)
offers it only lines that contain one of them (plus `follow` lines after, for tables), which is
what lets a 200 MB log be read at memory-bandwidth speed. Extractors are instantiated once per
scan and may keep state between lines (nvidia-smi tables span several lines).

Regular expressions in extractors follow the KB's rule: bounded repeats only (`{1,12}`, never
`+` or `*` over a broad class), so every line is matched in linear time.

A busy server repeats a few line shapes (metrics, requests, preemption warnings) hundreds of
thousands of times. The scanner folds such a family of lines (bot.evidence.families) for the
consumers that say, with `fold`, what in them can change their reading: it offers the first and
the last line of the family between two other offered lines, the first and last lines each of
the consumer's patterns matches, and the first line holding the highest value of a peak, and
skips the others. A consumer without `fold` is offered every line, as always.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Protocol

from bot.lazyre import LazyPattern
from bot.schema import Facts, GpuInfo, GpuProcess, field_names
from bot.structs import struct

_FACT_NAMES = frozenset(field_names(Facts)) - {"gpus", "processes"}


@struct(frozen=True, slots=True)
class Line:
    """A normalised line: ANSI colours, Slack entities, CR and code fences removed; bounded."""

    no: int  # 1-based line number in the input
    text: str


@struct(frozen=True, slots=True, eq=False)  # one object per pattern: compared by identity
class Probe:
    """A pattern a consumer runs on a family's lines, and which of the lines it matches the
    consumer must be offered: the `first` few and the `last` few between two other offered
    lines (what "the later line wins" and "keep the first and the latest" need), and with
    `peak`, the first line holding the highest value of each of its named groups. `check`:
    what the consumer further asks of a match before it acts on it."""

    pattern: LazyPattern
    check: Callable[[re.Match[str]], bool] | None = None
    first: int = 1
    last: int = 1
    peak: bool = False


@struct(frozen=True, slots=True)
class Fold:
    """How a consumer reads a line: what in it can change the reading, declared as literals.

    `gates`: a literal and a probe its presence runs (a rule's keyword and pattern, a
    signature's anchor and regex). `keys`: literals whose presence changes the reading, the same
    way on every line holding one (a marker that sets a flag, an engine's name). `whole`: a line
    holding one is read whole, every time (a traceback frame, a signature whose outcome depends
    on the lines around it). `marks`: a literal, and the state its line leaves for the lines
    after it to read (a phase milestone); a line reads that state after setting its own.

    Folding is exact for a consumer whose reading of a line is: facts set (the later line
    wins), facts set if unset (the first wins), peaks, flags that once set stay set, the first
    and latest lines kept as evidence; and which, while reading, looks at facts others set only
    to see whether they are set (FactSink.get(...) is None). Readings that apply only to a
    person's sentences need no declaring: a family's line is never one.
    """

    gates: tuple[tuple[str, Probe], ...] = ()
    keys: tuple[str, ...] = ()
    whole: tuple[str, ...] = ()
    whole_any_case: tuple[str, ...] = ()  # lower-case literals of `whole`'s kind, in any casing
    marks: tuple[tuple[str, Hashable], ...] = ()


class FactSink:
    """Collects facts as they are read. The later line wins: in a log with several start
    attempts, the last attempt is the one that failed."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._lines: dict[str, int] = {}
        self.gpus: dict[tuple[int | None, str | None], GpuInfo] = {}
        self.processes: dict[tuple[int | None, int | None, str | None], GpuProcess] = {}

    def set(self, name: str, value: Any, line_no: int = 0) -> None:
        if name not in _FACT_NAMES:
            raise KeyError(f"unknown fact {name!r}")
        if value is None:
            return
        self._values[name] = value
        self._lines[name] = line_no

    def set_default(self, name: str, value: Any, line_no: int = 0) -> None:
        """Set only if nothing better is known (e.g. a model name guessed from a path)."""
        if name not in self._values:
            self.set(name, value, line_no)

    def discard(self, name: str) -> None:
        self._values.pop(name, None)
        self._lines.pop(name, None)

    def get(self, name: str) -> Any:
        return self._values.get(name)

    def line_of(self, name: str) -> int | None:
        return self._lines.get(name)

    def add_gpu(self, gpu: GpuInfo) -> None:
        # Keyed by index and MIG instance so a repeated paste of the same table does not double
        # count, while the later reading of the same GPU replaces the earlier one. Without an
        # index or UUID (a CSV query of name and memory), the PCI bus id tells GPUs apart.
        self.gpus[(gpu.index, gpu.mig_instance or gpu.uuid or gpu.bus_id)] = gpu

    def add_process(self, proc: GpuProcess) -> None:
        self.processes[(proc.gpu_index, proc.pid, proc.gpu_uuid)] = proc

    def build(self) -> Facts:
        return Facts(**self._values, gpus=list(self.gpus.values()),
                     processes=list(self.processes.values()))


class Extractor(Protocol):
    """One source of evidence (vllm, sglang, tgi, torch, nvidia_smi, flags)."""

    name: ClassVar[str]
    anchors: ClassVar[tuple[str, ...]]
    follow: ClassVar[int]

    def feed(self, line: Line, sink: FactSink) -> None:
        """Read one offered line; write what it shows into the sink."""

    def finish(self, sink: FactSink) -> None:
        """Called once after the last line: flush pending state, derive combined facts."""

    # Optional: `def fold(self) -> Fold`, for extractors whose reading of a line folds (see
    # Fold); without it, every line of a family that holds one of its anchors is offered.
