"""PyTorch's CUDA out-of-memory message, in every wording torch has used.

torch <= 2.0: "Tried to allocate X (GPU 0; T total capacity; A already allocated; F free; ...)",
torch 2.1: "GPU 0 has a total capacty of T of which F is free. Process N has U memory in use",
torch >= 2.2: "... total capacity ...", "this process has U memory in use", and the terse
"(GPU 0; T total; 0 bytes free)". Units vary (bytes, KiB, MiB, GiB); facts are GiB. The device
total here is only a hint: nvidia-smi or vLLM's own profile are better sources.
"""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.rules import Rules, rule
from bot.evidence.units import qty

_GPU = r"(?P<oom_gpu_index>\d{1,3})"
_TOTAL = ("gpu_total_gib",)
_RULES = Rules(
    rule("Tried to allocate", rf"Tried to allocate {qty('oom_tried_to_allocate_gib')}"),
    rule("total capacity;",
         rf"\(GPU {_GPU}; {qty('gpu_total_gib')} total capacity; "
         rf"{qty('oom_process_in_use_gib')} already allocated; {qty('oom_free_gib')} free",
         weak=_TOTAL),
    rule("has a total capac",
         rf"GPU {_GPU} has a total capac(?:i)?ty of {qty('gpu_total_gib')} of which "
         rf"{qty('oom_free_gib')} is free", weak=_TOTAL),
    rule(" total; ", rf"\(GPU {_GPU}; {qty('gpu_total_gib')} total; {qty('oom_free_gib')} free",
         weak=_TOTAL),
    rule("memory in use",
         rf"[Pp]rocess (?:\d{{1,10}} )?has {qty('oom_process_in_use_gib')} memory in use"),
)


class TorchExtractor:
    name: ClassVar[str] = "torch"
    anchors: ClassVar[tuple[str, ...]] = (*_RULES.keywords, "total capacty")
    follow: ClassVar[int] = 0

    def feed(self, line: Line, sink: FactSink) -> None:
        _RULES.apply(line, sink)

    def finish(self, sink: FactSink) -> None:
        """Each message is one line."""
