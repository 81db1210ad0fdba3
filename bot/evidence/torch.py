"""PyTorch's CUDA out-of-memory message, in every wording torch has used.

torch <= 2.0: "Tried to allocate X (GPU 0; T total capacity; A already allocated; F free; R
reserved in total by PyTorch)", torch 2.1: "GPU 0 has a total capacty of T of which F is free.
Process N has U memory in use", torch >= 2.2: "... total capacity ...", "Including non-PyTorch
memory, this process has U memory in use", and the terse "(GPU 0; T total; 0 bytes free)".
Units vary (bytes, KiB, MiB, GiB); facts are GiB. The device total here is only a hint:
nvidia-smi or vLLM's own profile are better sources.

Who holds the memory is the point. "this process has U" is the process that failed (the
server). "Process N has U" is another process, except inside a container: there torch cannot
see its own PID and lists the server itself as "Process N". Such a line, with no "this
process", whose size is what PyTorch allocated plus the CUDA context, is the server; a line
far larger than that, or a second one, is someone else. In a message cut before PyTorch's own
figures the largest of several lines is taken to be the server, so what the others hold is a
floor. Each message is read on its own (every rank of a multi-GPU server prints one), whether
it arrived on one line or re-flowed over several.
"""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.rules import Rules, rule
from bot.evidence.units import NUM, UNIT, qty, to_gib
from bot.lazyre import lazy
from bot.schema import GpuProcess

_GPU = r"(?P<oom_gpu_index>\d{1,3})"
_TOTAL = ("gpu_total_gib",)
_RULES = Rules(
    rule("Tried to allocate", rf"Tried to allocate {qty('oom_tried_to_allocate_gib')}"),
    # torch_npu (Ascend) adds "X current active;" and says NPU; Intel's XPU build says no
    # free figure at all
    rule("total capacity;",
         rf"\((?:GPU|NPU|XPU) {_GPU}; {qty('gpu_total_gib')} total capacity; "
         rf"{qty('oom_allocated_gib')} already allocated; (?:{NUM} ?{UNIT} current active; )?"
         rf"(?:{qty('oom_free_gib')} free(?:; |\)))?"
         rf"(?:{qty('oom_reserved_gib')} reserved in total)?", weak=_TOTAL),
    rule("has a total capac",
         rf"GPU {_GPU} has a total capac(?:i)?ty of {qty('gpu_total_gib')} of which "
         rf"{qty('oom_free_gib')} is free", weak=_TOTAL),
    rule(" total; ", rf"\(GPU {_GPU}; {qty('gpu_total_gib')} total; {qty('oom_free_gib')} free",
         weak=_TOTAL),
    rule("this process has", rf"this process has {qty('oom_process_in_use_gib')} memory in use"),
    rule("allocated by PyTorch",
         rf"{qty('oom_allocated_gib')} is allocated by PyTorch"),
)
_OTHER = lazy(rf"[Pp]rocess (?P<pid>\d{{1,10}}) has (?P<n>{NUM}) ?(?P<u>{UNIT}) memory in use")
_UNALLOCATED = lazy(rf"(?P<n>{NUM}) ?(?P<u>{UNIT}) is reserved by PyTorch but unallocated")
# The caching allocator's own warning, in bytes: "memory allocation failed with OOM on device
# 5 while trying to allocate 671088640 bytes (free: 513736704, total: 85095874560)"
_ALLOC_FAILED = lazy(r"memory allocation failed with OOM on device (?P<gpu>\d{1,3})\s{0,4}"
                     r"while trying to allocate (?P<tried>\d{1,15}) bytes "
                     r"\(free: (?P<free>\d{1,15}), total: (?P<total>\d{1,15})\)")
_START = ("out of memory", "OutOfMemoryError", "Tried to allocate", "allocation failed with OOM")
# What a process holds beyond PyTorch's own memory: the CUDA context, cuBLAS/NCCL workspaces.
CONTEXT_GIB = 1.5


class _Message:
    """One OOM message: its numbers and the "Process N has" lines in it."""

    __slots__ = ("allocated", "gpu", "others", "this_process", "unallocated")

    def __init__(self) -> None:
        self.allocated: float | None = None
        self.unallocated: float | None = None
        self.this_process: float | None = None
        self.gpu: int | None = None
        self.others: list[tuple[int, float]] = []

    def own_reserved(self) -> float | None:
        return None if self.allocated is None else self.allocated + (self.unallocated or 0.0)

    def server_pid(self, used: float | None) -> int | None:
        """Which "Process N" line is the failing process, where torch did not say "this
        process" (torch 2.1, or a container). `used` is the GPU's total minus its free memory."""
        own = self.own_reserved()
        if self.this_process is not None or not self.others:
            return None
        if own is None:
            # a message cut before PyTorch's own figures: of several processes the failing one
            # is taken to be the largest, so what the others hold is the least it can be
            if len(self.others) < 2:
                return None
            return max(self.others, key=lambda o: o[1])[0]
        if len(self.others) == 1 and used is not None and own >= 0.5 \
                and abs(self.others[0][1] - used) <= max(0.5, 0.02 * used):
            # the only process listed holds all the memory in use, PyTorch's allocation in the
            # failing process included: it is that process, however much more it holds
            return self.others[0][0]
        # In a container torch lists every process under its host PID, the failing one too.
        # That one holds at least what PyTorch allocated: the only line that large is it; of
        # several, the one nearest PyTorch's memory plus a context.
        large = [o for o in self.others if o[1] >= own - 0.05]
        if len(large) == 1:
            return large[0][0]
        if large:
            pid, gib = min(large, key=lambda o: o[1] - own)
            if gib <= own + max(CONTEXT_GIB, 0.1 * own):
                return pid
        return None

    def processes(self, server_pid: int | None) -> list[GpuProcess]:
        """Each "Process N" line, told apart as the server itself or someone else."""
        known = self.this_process is not None or server_pid is not None
        return [GpuProcess(gpu_index=self.gpu, pid=pid, used_mib=gib * 1024, source="torch",
                           is_server=(pid == server_pid) if known else None)
                for pid, gib in self.others]

    def server_in_use(self, server_pid: int | None) -> float | None:
        """What the failing process holds on the GPU, as torch reported it."""
        if self.this_process is not None:
            return self.this_process
        return next((gib for pid, gib in self.others if pid == server_pid), None)



class TorchExtractor:
    name: ClassVar[str] = "torch"
    anchors: ClassVar[tuple[str, ...]] = (
        *_RULES.keywords, "total capacty", "memory in use", "but unallocated", *_START)
    follow: ClassVar[int] = 0

    def __init__(self) -> None:
        self._msg: _Message | None = None

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if any(k in text for k in _START) and (
                self._msg is None or "Tried to allocate" in text or "out of memory." in text):
            self._flush(sink)
            self._msg = _Message()
        _RULES.apply(line, sink)
        if "allocation failed with OOM" in text and (m := _ALLOC_FAILED.search(text)):
            for fact, group in (("oom_tried_to_allocate_gib", "tried"), ("oom_free_gib", "free")):
                sink.set(fact, int(m.group(group)) / 2**30, line.no)
            sink.set_default("gpu_total_gib", int(m.group("total")) / 2**30, line.no)
            sink.set("oom_gpu_index", int(m.group("gpu")), line.no)
        msg = self._msg
        if msg is None:
            return
        if "memory in use" in text:
            for other in _OTHER.finditer(text):
                gib = to_gib(other.group("n"), other.group("u"))
                if gib is not None:
                    msg.others.append((int(other.group("pid")), gib))
            if "this process has" in text:
                in_use = sink.get("oom_process_in_use_gib")
                # 0 bytes: NVML sees no process of its own (a container), not an empty GPU
                msg.this_process = in_use if in_use else None
        if "allocated by PyTorch" in text or "already allocated" in text:
            msg.allocated = sink.get("oom_allocated_gib")
        if "but unallocated" in text and (free := _UNALLOCATED.search(text)):
            msg.unallocated = to_gib(free.group("n"), free.group("u"))
        if "reserved in total" in text and sink.get("oom_reserved_gib") is not None:
            msg.unallocated = max(0.0, sink.get("oom_reserved_gib") - (msg.allocated or 0.0))
        if sink.get("oom_gpu_index") is not None:
            msg.gpu = sink.get("oom_gpu_index")

    def finish(self, sink: FactSink) -> None:
        self._flush(sink)
        total, free = sink.get("gpu_total_gib"), sink.get("oom_free_gib")
        reserved = sink.get("oom_reserved_gib")
        if reserved is None and sink.get("oom_allocated_gib") is not None:
            reserved = sink.get("oom_allocated_gib")
        if total is not None and free is not None and reserved is not None:
            sink.set_default("oom_outside_pytorch_gib", max(0.0, total - free - reserved))

    def _flush(self, sink: FactSink) -> None:
        msg, self._msg = self._msg, None
        if msg is None:
            return
        total, free = sink.get("gpu_total_gib"), sink.get("oom_free_gib")
        server = msg.server_pid(total - free if total is not None and free is not None
                                else None)
        for proc in msg.processes(server):
            sink.add_process(proc)
        if msg.allocated is not None and msg.unallocated is not None:
            sink.set_default("oom_reserved_gib", msg.allocated + msg.unallocated)
        in_use, own = msg.server_in_use(server), msg.own_reserved()
        if in_use is not None and own is not None:
            sink.set_default("oom_process_outside_pytorch_gib", max(0.0, in_use - own))
