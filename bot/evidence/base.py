"""The one interface every source of evidence implements, and the sink facts are written to.

An extractor names the literal `anchors` its lines contain; the scanner (bot.evidence.scan)
offers it only lines that contain one of them (plus `follow` lines after, for tables), which is
what lets a 200 MB log be read at memory-bandwidth speed. Extractors are instantiated once per
scan and may keep state between lines (nvidia-smi tables span several lines).

Regular expressions in extractors follow the KB's rule: bounded repeats only (`{1,12}`, never
`+` or `*` over a broad class), so every line is matched in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from bot.schema import Facts, GpuInfo, GpuProcess, field_names

_FACT_NAMES = frozenset(field_names(Facts)) - {"gpus", "processes"}


@dataclass(frozen=True, slots=True)
class Line:
    """A normalised line: ANSI colours, Slack entities, CR and code fences removed; bounded."""

    no: int  # 1-based line number in the input
    text: str


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
