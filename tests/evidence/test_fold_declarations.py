"""A fold declares every reading its extractor does of a program's line: with every literal
the fold declares blotted out, a line still changes what the extractor holds (a fact, a flag)
only where one of the fold's probes matches it (a probe whose literal is in a family's constant
text runs on every line of it). A reading added to `feed` and not to `fold` fails here, before
folding can skip the lines it reads."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from bot.diagnose import compiled_kb
from bot.evidence import EXTRACTORS
from bot.evidence.base import Extractor, FactSink, Fold, Line, Probe
from bot.evidence.paste import is_prose
from bot.evidence.text import normalize_line
from bot.kb.loader import load_kb
from bot.kb.match import Matcher
from tests.evidence.texts import every_line

FOLDING = [cls for cls in EXTRACTORS if getattr(cls, "fold", None) and not cls.follow]
FOLDING_IDS = [cls.name for cls in FOLDING]


def _state(extractor: object, sink: FactSink) -> Any:
    return (dict(sink._values), {k: v for k, v in vars(extractor).items()})


def _matches(probe: Probe, text: str) -> bool:
    m = probe.pattern.search(text)
    return m is not None and (probe.check is None or probe.check(m))


def _masked(fold: Fold, text: str) -> str:
    """`text` with every literal the fold declares blotted out (as long as it was)."""
    literals = [*(literal for literal, _ in fold.gates), *fold.keys, *fold.whole,
                *(literal for literal, _ in fold.marks)]
    for literal in sorted(set(literals), key=len, reverse=True):
        text = text.replace(literal, "\x00" * len(literal))
    for literal in fold.whole_any_case:
        text = re.sub(re.escape(literal), lambda m: "\x00" * len(m.group()), text,
                      flags=re.IGNORECASE)
    return text


@pytest.mark.slow
@pytest.mark.parametrize("cls", FOLDING, ids=FOLDING_IDS)
def test_every_reading_is_in_the_fold(cls: type[Extractor]) -> None:
    lines = [normalize_line(x) for x in every_line()]
    read = 0
    for text in lines:
        if not any(a in text for a in cls.anchors) or is_prose(text):
            continue  # never offered it, or a person's words (no family line is)
        extractor, sink = cls(), FactSink()
        before = _state(extractor, sink)
        extractor.feed(Line(1, text), sink)
        if _state(extractor, sink) == before:
            continue
        read += 1
        # without what the fold declares, the line reads as nothing, or as a probe says
        extractor, sink = cls(), FactSink()
        fold: Fold = getattr(extractor, "fold")()  # noqa: B009  (optional in the protocol)
        masked = _masked(fold, text)
        extractor.feed(Line(1, masked), sink)
        if _state(extractor, sink) != before:
            probes = {probe for _, probe in fold.gates}
            assert any(_matches(p, masked) for p in probes), (cls.name, text)
    assert read > 10  # enough real lines read for the check to mean something


def _matcher_state(matcher: Matcher) -> Any:
    """What the matcher holds, but its KB and the scratch position of its last match."""
    state = {k: v for k, v in vars(matcher).items()
             if k not in ("compiled", "_owner", "_at", "anchors", "folded_anchors", "phase")}
    state["phase"] = {k: v for k, v in vars(matcher.phase).items() if k != "markers"}
    return copy.deepcopy(state)


@pytest.mark.slow
def test_every_reading_of_the_matcher_is_in_its_fold() -> None:
    compiled = compiled_kb(load_kb())
    fold = Matcher(compiled).fold()
    probes = {probe for _, probe in fold.gates}
    read = 0
    finder = Matcher(compiled)
    for text in (normalize_line(x) for x in every_line()):
        offered = finder.compiled.finder.find_matches_as_indexes(text) or any(
            a in text.lower() for a in compiled.folded_anchors)
        if not offered or is_prose(text):
            continue
        matcher, sink = Matcher(compiled), FactSink()
        before = _matcher_state(matcher)
        matcher.feed(Line(1, text), sink)
        if _matcher_state(matcher) == before:
            continue
        read += 1
        matcher, masked = Matcher(compiled), _masked(fold, text)
        if is_prose(masked):
            continue  # blotting its words made it read as a sentence, which a family never is
        matcher.feed(Line(1, masked), sink)
        if _matcher_state(matcher) != before:
            assert any(_matches(p, masked) for p in probes), text
    assert read > 100
