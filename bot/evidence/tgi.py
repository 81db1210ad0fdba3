"""Text Generation Inference: version, the token pool warm-up settled on, allocation failures.

The allocator message of TGI's Rust-side panics arrives either on one line with literal `\\n`
escapes (inside the panic string) or spread over the following lines; both are read.
"""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.evidence.rules import Rules, rule
from bot.evidence.units import num, qty

_RULES = Rules(
    rule("text-generation-inference",
         r"text-generation-inference[:= v]{1,3}(?P<engine_version>\d{1,3}\.\d{1,3}[\w.]{0,20})"),
    rule("text-generation-launcher",
         r"text-generation-launcher (?P<engine_version>\d{1,3}\.\d{1,3}[\w.]{0,20})"),
    rule("Setting max batch total tokens",
         rf"Setting max batch total tokens to {num('kv_cache_tokens')}"),
    rule("Not enough memory to handle",
         rf"Not enough memory to handle {num('max_batch_prefill_tokens')} prefill tokens",
         default=True),
    rule("Allocation on device", r"Allocation on device (?P<oom_gpu_index>\d{1,3})"),
    rule("Currently allocated",
         rf"Currently allocated {{0,40}}: {qty('oom_allocated_gib')}"),
    rule("Requested ", rf"Requested {{0,40}}: {qty('oom_tried_to_allocate_gib')}"),
    rule("Device limit", rf"Device limit {{0,40}}: {qty('gpu_total_gib')}", default=True),
    rule("Free (according to CUDA)",
         rf"Free \(according to CUDA\) {{0,40}}: {qty('oom_free_gib')}"),
)
# The allocator's "Requested"/"Device limit" words are generic: read only inside its message.
_INSIDE = ("Requested ", "Device limit", "Free (according to CUDA)")
_MARKERS = ("text-generation-", "text_generation", "--model-id", "--num-shard", "model_id:")
_START = "Currently allocated"
_RULES_OUTSIDE = Rules(*(r for r in _RULES if r.keyword not in (*_INSIDE, _START)))


class TgiExtractor:
    name: ClassVar[str] = "tgi"
    anchors: ClassVar[tuple[str, ...]] = (
        *(k for k in _RULES.keywords if k not in _INSIDE), *_MARKERS)
    follow: ClassVar[int] = 5  # the allocator message's remaining lines

    def __init__(self) -> None:
        self._in_alloc = 0

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if _START in text:
            self._in_alloc = 5
        elif self._in_alloc:
            self._in_alloc -= 1
        (_RULES if self._in_alloc else _RULES_OUTSIDE).apply(line, sink)
        # The allocator message is torch's (any server with a memory fraction set): only TGI's
        # own names say the engine.
        if any(m in text for m in _MARKERS):
            sink.set("engine", "tgi", line.no)

    def finish(self, sink: FactSink) -> None:
        self._in_alloc = 0

