"""The generated server log is what the benchmark says it is: `density` of its lines carry an
anchor, the others none."""

from __future__ import annotations

import pytest

from bot.diagnose import compiled_kb
from bot.evidence import EXTRACTORS
from bot.evidence.scan import Scanner
from bot.kb.loader import load_kb
from bot.kb.match import Matcher
from tests.evidence import serverlog


@pytest.mark.parametrize("density", [0.003, 0.05, 0.2, 0.5])
def test_the_density_is_the_share_of_anchored_lines(density: float) -> None:
    scanner = Scanner([*(cls() for cls in EXTRACTORS), Matcher(compiled_kb(load_kb()))],
                      large=False)
    lines = list(serverlog.lines(20000, density, mix=serverlog.EVERY_SHAPE))
    anchored = sum(bool(scanner._anchors.line(line.encode())) for line in lines)
    assert anchored == round(density * len(lines))
