"""Pasted nvidia-smi output: the default table (every driver layout), MIG tables, CSV from
--query-gpu / --query-compute-apps, `nvidia-smi -L`, and the GPU lines of issue templates.

Missing values (`[N/A]`, `[Not Supported]`, `N/A`, blank) are unknown, never 0.

nvidia-smi writes CSV without quoting, so a process name with `, ` in it (`python3 -c "a, b"`)
adds cells: a row is read as CSV (quoted fields honoured), and when it has more cells than
columns the surplus belongs to the one free-text column (the name), because every other
column is a number, a uuid or a bus id. Table rows are read by the positions of the header's
columns: the name starts under "Process name", the memory is the last cell, whatever the name
holds. A process is never dropped for its name. CSV without a
header is read only when the paste names its columns (the `--query-...=a,b,c` command line).
The scalar facts (gpu_name, gpu_total_gib, ...) describe the smallest GPU listed: with unequal
GPUs the smallest is the one that limits a sharded server.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.units import is_unknown, to_float, to_int, to_mib
from bot.lazyre import lazy
from bot.schema import GpuInfo, GpuProcess

_HEADER = lazy(r"NVIDIA-SMI (?P<smi>[\w.-]{1,20})(?: {1,40}Driver Version: "
                     r"(?P<driver>[\w.-]{1,20}))?(?: {1,40}CUDA Version: (?P<cuda>[\d.]{1,10}))?")
_DRIVER = lazy(r"[Dd]river [Vv]ersion: {0,8}(?P<driver>\d{2,4}\.[\d.]{1,12})")
_CUDA = lazy(r"CUDA Version: {0,8}(?P<cuda>\d{1,3}\.\d{1,3})")
_NAME_ROW = lazy(
    r"^\|\s{0,8}(?P<index>\d{1,3})\s{1,8}(?P<name>\S.{0,60}?)\s{1,40}(?:On|Off)\s{0,8}\|"
    r"\s{0,12}(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_MEM_ROW = lazy(r"^\|.{0,60}?\|\s{0,20}(?P<used>\d{1,9})MiB\s{0,6}/\s{0,6}"
                      r"(?P<total>\d{1,9})MiB"
                      r"\s{0,20}\|\s{0,20}(?P<util>\d{1,3}%|N/A)")
_MIG_MODE_ROW = lazy(
    r"^\|\s{1,60}\|\s{1,60}\|\s{0,30}(?P<mode>Enabled|Disabled|N/A)\s{0,4}\|")
_MIG_ROW = lazy(
    r"^\|\s{0,4}(?P<gpu>\d{1,3})\s{1,4}(?P<gi>\d{1,3})\s{1,4}(?P<ci>\d{1,3})\s{1,4}"
    r"(?P<dev>\d{1,3})\s{1,4}\|\s{1,40}(?P<used>\d{1,9})MiB\s{0,6}/\s{0,6}(?P<total>\d{1,9})MiB")
_PROC_ROW = lazy(
    r"^\|\s{0,8}(?P<gpu>\d{1,3}|N/A)\s{1,8}(?:(?:\d{1,4}|N/A)\s{1,8}(?:\d{1,4}|N/A)\s{1,16})?"
    r"(?P<pid>\d{1,10}|N/A)\s{1,10}(?P<type>C\+G|M\+C\+G|M\+C|C|G|M)\s{1,10}"
    r"(?P<name>\S.{0,100}?)?\s{0,80}(?P<used>\d{1,9}MiB|N/A)\s{0,8}\|\s{0,4}$")
# A process row cut at the header's "Process name" column: what comes before it, and the memory
# cell that ends the row.
_PROC_HEAD = lazy(
    r"\|\s{0,8}(?P<gpu>\d{1,3}|N/A)\s{1,8}(?:(?:\d{1,4}|N/A)\s{1,8}(?:\d{1,4}|N/A)\s{1,16})?"
    r"(?P<pid>\d{1,10}|N/A)\s{1,10}(?P<type>C\+G|M\+C\+G|M\+C|C|G|M)\s{0,10}")
_PROC_TAIL = lazy(r"(?:^|\s)(?P<used>\d{1,9}MiB|N/A)\s{0,8}\|\s{0,4}$")
_LISTING = lazy(
    r"^\s{0,8}(?:GPU )?(?P<index>\d{1,3}): "
    r"(?P<name>(?:NVIDIA|Tesla|GeForce|Quadro)[\w .()/-]{1,60}?)"
    r"(?: {1,8}(?P<mib>\d{2,7}) ?MiB| \(UUID: (?P<uuid>GPU-[\w-]{1,64})\))?\s{0,8}$")
_TEMPLATE = lazy(
    r"GPU (?:(?P<type>type)|(?P<number>number)|(?P<memory>memory)): {0,8}(?P<value>\S.{0,80}?)"
    r"\s{0,8}$")
_QUERY = lazy(r"--query-(?P<what>gpu|compute-apps)=(?P<fields>[\w.,]{1,512})")

# CSV column -> GpuInfo / GpuProcess field (aliases print their canonical names, both kept).
_GPU_COLUMNS = {"index": "index", "name": "name", "gpu_name": "name", "uuid": "uuid",
                "gpu_uuid": "uuid", "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id",
                "memory.total": "total_mib", "memory.used": "used_mib",
                "memory.free": "free_mib", "utilization.gpu": "utilization_pct",
                "compute_cap": "compute_capability", "mig.mode.current": "mig_mode"}
_PROC_COLUMNS = {"pid": "pid", "process_name": "name", "name": "name",
                 "used_gpu_memory": "used_mib", "used_memory": "used_mib",
                 "gpu_uuid": "gpu_uuid", "uuid": "gpu_uuid"}
_PROC_HINTS = {"pid", "process_name", "used_gpu_memory", "used_memory"}
# The columns whose values are free text (and so may hold ", ").
_TEXT_COLUMNS = ("process_name", "name", "gpu_name")
_KNOWN_COLUMNS = {*_GPU_COLUMNS, *_PROC_COLUMNS, "driver_version", "timestamp", "gpu_serial",
                  "temperature.gpu", "pstate", "fan.speed", "utilization.memory"}

def _csv_row(text: str, columns: list[str]) -> dict[str, str] | None:
    """`text` as a row of `columns`, or None when it is not one (the CSV has ended)."""
    cells = text.split(", ")
    if any(c.startswith('"') for c in cells):  # a quoted field, as a spreadsheet writes them
        try:  # strict: text after a closing quote means the quote was part of a name
            quoted = next(csv.reader([text], skipinitialspace=True, strict=True), [])
        except csv.Error:
            quoted = []
        if len(quoted) == len(columns):
            cells = quoted
    if len(cells) > len(columns):
        free = next((i for i, c in enumerate(columns) if c in _TEXT_COLUMNS), None)
        if free is None:
            return None
        extra = len(cells) - len(columns)
        cells = [*cells[:free], ", ".join(cells[free:free + extra + 1]),
                 *cells[free + extra + 1:]]
    if len(cells) != len(columns):
        return None
    return {column: cell.strip() for column, cell in zip(columns, cells, strict=True)}


def _unknown_name(cell: str) -> bool:
    # a name may start with "[" ("[python3] worker"); only a whole bracketed word is a marker
    return is_unknown(cell) and (not cell.startswith("[") or cell.endswith("]"))


# A process is the server under diagnosis when its name says so.
SERVER_NAME = lazy(r"vllm|VLLM::|sglang|text-generation|text_generation|EngineCore",
                         re.IGNORECASE)
_INTERPRETER = lazy(r"(?:^|/)python[\d.]{0,5}$")


def is_server(name: str | None) -> bool | None:
    """True for the inference server, False for another program, None for a bare interpreter
    (older vLLM shows as `python`, and so does everything else)."""
    if not name:
        return None
    if SERVER_NAME.search(name):
        return True
    return None if _INTERPRETER.search(name.strip()) else False


class NvidiaSmiExtractor:
    name: ClassVar[str] = "nvidia_smi"
    anchors: ClassVar[tuple[str, ...]] = (
        "NVIDIA-SMI", "river Version", "river version", "CUDA Version", "Processes:",
        "MIG devices:", "MiB", "00000000:", "--query-", "memory.total", "process_name",
        ": NVIDIA ", "GPU type:", "GPU number:", "GPU memory:")
    follow: ClassVar[int] = 40  # rows of a table or CSV after its header

    def __init__(self) -> None:
        self._gpus: dict[object, GpuInfo] = {}
        self._pending: GpuInfo | None = None
        self._last: GpuInfo | None = None
        self._columns: list[str] | None = None
        self._columns_are_procs = False
        self._header_seen = False
        self._csv_rows = 0
        self._no_processes = False
        self._name_at: int | None = None  # the process table's "Process name" column

    # -- lines ------------------------------------------------------------------------------
    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if self._csv(text, sink, line.no):
            return
        if "NVIDIA-SMI" in text and (m := _HEADER.search(text)):
            self._versions(m.group("driver"), m.group("cuda"), sink, line.no)
            return
        if "ersion" in text:
            for pat in (_DRIVER, _CUDA):
                if m := pat.search(text):
                    self._versions(m.groupdict().get("driver"), m.groupdict().get("cuda"),
                                   sink, line.no)
        if "No running processes found" in text:
            self._no_processes = True
        if text.startswith("|"):
            self._table_row(text, sink)
        elif "GPU " in text and (m := _TEMPLATE.search(text)):
            self._template(m, sink, line.no)
        elif m := _LISTING.match(text):
            mib = to_float(m.group("mib"))
            self._add(GpuInfo(index=to_int(m.group("index")), name=m.group("name").strip(),
                              uuid=m.group("uuid"), total_mib=mib))

    def _versions(self, driver: str | None, cuda: str | None, sink: FactSink, no: int) -> None:
        sink.set("driver_version", driver, no)
        sink.set("cuda_version", cuda, no)

    def _table_row(self, text: str, sink: FactSink) -> None:
        if m := _NAME_ROW.match(text):
            self._flush()
            self._pending = GpuInfo(index=int(m.group("index")), name=m.group("name").strip(),
                                    bus_id=m.group("bus"))
        elif m := _MEM_ROW.match(text):
            gpu = self._pending or GpuInfo()
            self._pending = None
            gpu.used_mib = float(m.group("used"))
            gpu.total_mib = float(m.group("total"))
            util = m.group("util")
            gpu.utilization_pct = None if util == "N/A" else float(util.rstrip("%"))
            self._last = self._add(gpu)
        elif (m := _MIG_MODE_ROW.match(text)) and self._last is not None:
            mode = m.group("mode")
            self._last.mig_mode = None if mode == "N/A" else mode
            self._last = None
        elif m := _MIG_ROW.match(text):
            self._add(GpuInfo(index=int(m.group("dev")), parent_index=int(m.group("gpu")),
                              mig_instance=f"GI {m.group('gi')}/CI {m.group('ci')}",
                              used_mib=float(m.group("used")),
                              total_mib=float(m.group("total"))))
        elif "Process name" in text and "PID" in text:
            self._name_at = text.index("Process name")
        elif (row := self._proc_row(text)) is not None:
            gpu_no, pid, name, used = row
            sink.add_process(GpuProcess(
                gpu_index=to_int(gpu_no), pid=to_int(pid), name=name,
                used_mib=to_mib(used) if used != "N/A" else None, is_server=is_server(name)))

    def _proc_row(self, text: str) -> tuple[str, str, str | None, str] | None:
        """(gpu, pid, name, memory) of a process row: cut at the header's name column when
        the header was seen (any name), else read by the pattern (names without a memory
        figure of their own)."""
        at = self._name_at
        if at is not None and len(text) > at and (head := _PROC_HEAD.fullmatch(text[:at])) \
                and (tail := _PROC_TAIL.search(text, at)):
            name = text[at:tail.start()].strip() or None
            return head.group("gpu"), head.group("pid"), name, tail.group("used")
        if m := _PROC_ROW.match(text):
            return (m.group("gpu"), m.group("pid"), (m.group("name") or "").strip() or None,
                    m.group("used"))
        return None

    def _template(self, m: re.Match[str], sink: FactSink, no: int) -> None:
        value = m.group("value")
        if m.group("type"):
            sink.set("gpu_name", value, no)
        elif m.group("number"):
            sink.set("gpu_count", to_int(value.split()[0]), no)
        elif um := re.match(r"(\d{1,4}(?:\.\d{1,4})?) ?(?:GiB|GB)$", value):
            sink.set("gpu_total_gib", float(um.group(1)), no)

    # -- CSV --------------------------------------------------------------------------------
    def _csv(self, text: str, sink: FactSink, no: int) -> bool:
        """Read `text` as CSV if it is a query command, a CSV header, or a row of one."""
        if "--query-" in text and (m := _QUERY.search(text)):
            self._start_csv(m.group("fields").split(","), m.group("what") == "compute-apps")
            self._header_seen = False
            return True
        cells = [c.strip() for c in text.split(", ")]
        names = [c.split(" [", 1)[0] for c in cells]
        if len(cells) > 1 and sum(n in _KNOWN_COLUMNS for n in names) * 2 > len(names) and \
                all(re.fullmatch(r"[a-z_.]{1,64}", n) for n in names):
            self._start_csv(names, bool(_PROC_HINTS & set(names)))
            self._header_seen = True
            return True
        if self._columns is None or not text.strip():
            return self._columns is not None
        row = _csv_row(text, self._columns)
        if row is None:
            self._end_csv(sink)
            return False
        self._csv_rows += 1
        if self._columns_are_procs:
            self._csv_process(row, sink)
        else:
            self._csv_gpu(row, sink, no)
        return True

    def _start_csv(self, columns: list[str], procs: bool) -> None:
        self._columns = [c.strip() for c in columns if c.strip()]
        self._columns_are_procs = procs
        self._csv_rows = 0

    def _end_csv(self, sink: FactSink) -> None:
        if self._columns_are_procs and self._header_seen and self._csv_rows == 0:
            self._no_processes = True  # header only: nothing runs (documented behaviour)
        self._columns = None

    def _csv_gpu(self, row: dict[str, str], sink: FactSink, no: int) -> None:
        gpu = GpuInfo()
        for column, value in row.items():
            attr = _GPU_COLUMNS.get(column)
            if column == "driver_version" and not is_unknown(value):
                sink.set("driver_version", value, no)
            if attr is None or is_unknown(value):
                continue
            if attr in ("total_mib", "used_mib", "free_mib"):
                setattr(gpu, attr, to_mib(value))
            elif attr == "utilization_pct":
                setattr(gpu, attr, to_float(value.rstrip("%").strip()))
            elif attr == "index":
                gpu.index = to_int(value)
            else:
                setattr(gpu, attr, value)
        self._add(gpu)

    def _csv_process(self, row: dict[str, str], sink: FactSink) -> None:
        proc = GpuProcess()
        for column, value in row.items():
            attr = _PROC_COLUMNS.get(column)
            if attr is None or (_unknown_name(value) if attr == "name" else is_unknown(value)):
                continue
            if attr == "used_mib":
                proc.used_mib = to_mib(value)
            elif attr == "pid":
                proc.pid = to_int(value)
            else:
                setattr(proc, attr, value)
        proc.is_server = is_server(proc.name)
        sink.add_process(proc)

    # -- GPUs -------------------------------------------------------------------------------
    def _add(self, gpu: GpuInfo) -> GpuInfo:
        """Merge readings of the same GPU (table row, CSV row, listing) into one record."""
        key: object = (gpu.index, gpu.parent_index, gpu.mig_instance) if gpu.index is not None \
            else (gpu.uuid or gpu.bus_id or gpu.name)
        old = self._gpus.get(key)
        if old is not None:
            for f in dataclasses.fields(GpuInfo):
                if getattr(gpu, f.name) is None:
                    setattr(gpu, f.name, getattr(old, f.name))
        self._gpus[key] = gpu
        return gpu

    def _flush(self) -> None:
        if self._pending is not None:
            self._add(self._pending)
            self._pending = None

    def finish(self, sink: FactSink) -> None:
        self._flush()
        if self._columns is not None:
            self._end_csv(sink)
        for gpu in self._gpus.values():
            sink.add_gpu(gpu)
        if self._no_processes and not sink.processes:
            sink.set_default("foreign_processes_gib", 0.0)
        physical = [g for g in self._gpus.values() if g.mig_instance is None]
        if not physical:
            return
        sink.set_default("gpu_count", len(physical))
        sized = [g for g in physical if g.total_mib is not None]
        gpu = min(sized, key=lambda g: g.total_mib or 0.0) if sized else physical[0]
        sink.set("gpu_name", gpu.name)
        sink.set_default("gpu_total_gib", None if gpu.total_mib is None else gpu.total_mib / 1024)
        sink.set("gpu_used_gib", None if gpu.used_mib is None else gpu.used_mib / 1024)
        sink.set("compute_capability", gpu.compute_capability)
