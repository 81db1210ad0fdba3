"""Every KB pattern runs in linear time on hostile input.

The load-time rule (bounded repeats, no nesting, no back-references) is the guarantee; this
test checks it held in practice: on 1 MB adversarial strings built from each pattern's own
literals, quadrupling the input at most roughly quadruples the time.
"""

from __future__ import annotations

import re
import time

import pytest

from bot.kb.loader import load_kb
from bot.kb.match import CompiledKB

MB = 1 << 20


def _patterns() -> list[tuple[str, re.Pattern[str], tuple[str, ...]]]:
    compiled = CompiledKB(load_kb(use_cache=False))
    out = [(cs.sig.id, re.compile(cs.regex.pattern, cs.regex.flags), cs.anchors)
           for cs in compiled.signatures]
    out += [(f"context:{rx.pattern}", re.compile(rx.pattern), anchors)
            for rx, anchors in compiled.contexts]
    out += [(f"{cs.sig.id}:with_any", re.compile(rx.pattern, rx.flags), cs.anchors)
            for cs in compiled.signatures for rx in cs.with_any]
    return out


def adversarial(anchor: str, size: int) -> list[str]:
    """Strings that make a backtracking engine try hard: the anchor over and over, followed
    by what a number, a unit or a closing parenthesis would be, but never the rest."""
    seeds = [anchor + " ", anchor + "1" * 40, anchor + " (" + "9" * 30, "1" * 64, " " * 64,
             "(" * 64, anchor[: max(1, len(anchor) - 1)]]
    return [(s * (size // len(s) + 1))[:size] for s in seeds]


def _best_time(rx: re.Pattern[str], text: str) -> float:
    """CPU time of this process (other processes on a shared machine do not count), best of 3."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        rx.search(text)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.slow
def test_every_pattern_is_linear_on_1mb_adversarial_input() -> None:
    offenders = []
    for name, rx, anchors in _patterns():
        for small, big in zip(adversarial(anchors[0], MB // 4), adversarial(anchors[0], MB),
                              strict=True):
            t_small, t_big = _best_time(rx, small), _best_time(rx, big)
            # linear is ~4x and quadratic 16x: the ratio, not a wall-clock limit that depends
            # on the machine, tells them apart (generous noise for a shared two-core machine)
            if t_big > 10 * t_small + 0.05:
                offenders.append((name, round(t_small, 4), round(t_big, 4)))
    assert not offenders, offenders
