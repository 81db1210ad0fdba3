"""SGLang's start-up lines: the weights it loaded and the token pool it could (not) build."""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Fold, Line
from bot.evidence.paste import names_engine
from bot.evidence.rules import Rules, rule
from bot.evidence.units import num

# SGLang divides by 2**30 and prints "GB".
_GB = r" ?GB"

_RULES = Rules(
    rule("Load weight end",
         rf"Load weight end\. type=[\w.]{{1,80}}, dtype=(?:torch\.)?(?P<dtype>\w{{1,20}}), "
         rf"avail mem={num('free_memory_gib')}{_GB}, mem usage={num('weights_gib')}{_GB}"),
    rule("is larger than the profiled value",
         rf"max_total_tokens={num('max_total_tokens')} is larger than the profiled value "
         rf"{num('kv_cache_tokens')}"),
    rule("max_total_num_tokens=", rf"max_total_num_tokens={num('kv_cache_tokens')}"),
    rule("max_total_num_tokens=", rf"context_len={num('max_model_len')}"),
    rule("KV Cache is allocated", rf"#tokens: {num('kv_cache_tokens')}"),
)
_MARKERS = ("sglang", "SGLang", "Not enough memory. Please try to increase --mem-fraction-static")
# A sentence that names SGLang ("it works with vLLM or SGLang") says less than its log does.
# Only SGLang has this setting: a config that names it is an SGLang config.
_HINTS = ("mem-fraction-static", "mem_fraction_static")


_FOLD = _RULES.fold(keys=(*_MARKERS, *_HINTS))


class SglangExtractor:
    name: ClassVar[str] = "sglang"
    anchors: ClassVar[tuple[str, ...]] = (*_RULES.keywords, *_MARKERS, *_HINTS)
    follow: ClassVar[int] = 0

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if _RULES.apply(line, sink):
            sink.set("engine", "sglang", line.no)
        elif any(m in text for m in _MARKERS):
            names_engine(sink, "sglang", line)
        elif any(h in text for h in _HINTS):
            sink.set_default("engine", "sglang", line.no)

    def fold(self) -> Fold:
        """Rules, and engine names whose effect is the same on every line holding them."""
        return _FOLD

    def finish(self, sink: FactSink) -> None:
        """Nothing spans lines."""
