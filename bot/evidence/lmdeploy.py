"""lmdeploy: the engine's names, so the answer's commands are lmdeploy's.

TurboMind, lmdeploy's C++ engine, prefixes its lines `[TM][WARNING]`, `[TM][ERROR]`; the
PyTorch engine and the CLI log as `lmdeploy - ERROR - ...`. A person who only names lmdeploy
in a sentence ("vLLM works, lmdeploy does not") says less than a command or a log line does.
"""

from __future__ import annotations

from typing import ClassVar

from bot.evidence.base import FactSink, Fold, Line
from bot.evidence.paste import names_engine

# The engine's own words: a command, a log prefix, its config classes.
_STRONG = ("lmdeploy serve", "lmdeploy chat", "[TM][", "- lmdeploy -", "lmdeploy/turbomind",
           "TurbomindEngineConfig", "PytorchEngineConfig", "from lmdeploy")
_NAMED = ("lmdeploy", "LMDeploy", "TurboMind", "turbomind")
_FOLD = Fold(keys=(*_STRONG, *_NAMED))


class LmdeployExtractor:
    name: ClassVar[str] = "lmdeploy"
    anchors: ClassVar[tuple[str, ...]] = (*_STRONG, *_NAMED)
    follow: ClassVar[int] = 0

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        if any(k in text for k in _STRONG):
            sink.set("engine", "lmdeploy", line.no)
        elif any(k in text for k in _NAMED):
            names_engine(sink, "lmdeploy", line)

    def fold(self) -> Fold:
        """Engine names, whose effect is the same on every line holding them."""
        return _FOLD

    def finish(self, sink: FactSink) -> None:
        """Nothing spans lines."""
