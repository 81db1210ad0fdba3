"""Line families are data with examples: each matches its real lines and no near-miss, and
every line a family admits is a program's, never a person's sentence (prose rules never
apply to a folded line)."""

from __future__ import annotations

import pytest

from bot.evidence.families import FAMILIES, Family
from bot.evidence.paste import is_prose
from bot.evidence.text import normalize_line
from tests.evidence import serverlog


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_examples_match_and_near_misses_do_not(family: Family) -> None:
    assert family.examples
    for line in family.examples:
        assert family.matches(line.encode()), line
        assert normalize_line(line) == line
    for line in family.near_misses:
        assert not family.matches(line.encode()), line


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_family_line_is_never_prose(family: Family) -> None:
    """Tried with every process tag the logger may put first, on every example."""
    tags = ("", "(APIServer pid=3646) ", "(VllmWorker rank=1 pid=7) ",
            "(EngineCore_DP0 pid=65064) ")
    for line in family.examples:
        for tag in tags if family.template.startswith("{tag}") else ("",):
            body = line.split(") ", 1)[-1] if line.startswith("(") else line
            candidate = tag + body
            if family.matches(candidate.encode()):
                assert not is_prose(candidate), candidate


def test_each_shape_of_the_generated_log_is_a_family() -> None:
    shapes = {}
    for line in serverlog.lines(4000, 1.0, mix=serverlog.EVERY_SHAPE):
        found = [f.name for f in FAMILIES if f.matches(line.encode())]
        assert found, line
        shapes[found[0]] = line
    assert set(shapes) == {f.name for f in FAMILIES}
