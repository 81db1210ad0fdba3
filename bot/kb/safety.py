"""Keeping KB patterns fast on hostile input, and finding the literal each one needs.

Python's `re` backtracks. A pattern such as `\\d+ GiB` searched over a megabyte of digits does
quadratic work, and nested repeats can go exponential. The rule for KB patterns is therefore
structural and checked at load time: every repeat is bounded (at most MAX_REPEAT), repeats do
not nest, and there are no back-references. Then each search costs at most
MAX_REPEAT x line length, and lines are capped (bot.evidence.text.MAX_LINE_CHARS).

The anchor is the longest literal run every match must contain; the scanner finds every
anchor of the KB in one Aho-Corasick pass over the line before any regex runs.
"""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]  # re's own parser (3.11+)
import re._parser as _p  # type: ignore[import-not-found]
from typing import Any

MAX_REPEAT = 512
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)} - {None}
_UNSAFE_ANCHOR_CHARS = set("<>&\r\n\x1b")


class UnsafePattern(ValueError):
    pass


def check_linear(pattern: str) -> None:
    """Raise UnsafePattern if `pattern` could take more than linear time."""
    try:
        parsed = _p.parse(pattern)
    except re.error as exc:
        raise UnsafePattern(f"bad regex: {exc}") from None
    _walk(parsed, depth=0, pattern=pattern)


def _walk(items: Any, depth: int, pattern: str) -> None:
    for op, av in items:
        if op in _REPEATS:
            lo, hi, body = av
            if hi == _c.MAXREPEAT or hi > MAX_REPEAT:
                raise UnsafePattern(
                    f"unbounded repeat in {pattern!r}: write {{{lo},N}} with N <= {MAX_REPEAT} "
                    "instead of *, + or {n,}"
                )
            inner = depth + 1 if hi > 1 else depth
            if inner > 1:
                raise UnsafePattern(f"nested repeats in {pattern!r}")
            _walk(body, inner, pattern)
        elif op in (_c.GROUPREF, getattr(_c, "GROUPREF_EXISTS", None)):
            raise UnsafePattern(f"back-reference in {pattern!r}")
        elif op == _c.SUBPATTERN:
            _walk(av[-1], depth, pattern)
        elif op == _c.BRANCH:
            for branch in av[1]:
                _walk(branch, depth, pattern)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            _walk(av[1], depth, pattern)
        elif op == getattr(_c, "ATOMIC_GROUP", None):
            _walk(av, depth, pattern)


def derive_anchor(pattern: str) -> str | None:
    """The longest literal run that every match of `pattern` must contain, or None."""
    parsed = _p.parse(pattern)
    if parsed.state.flags & re.IGNORECASE:
        return None
    best = ""
    for run in _literal_runs(list(parsed)):
        if len(run) > len(best):
            best = run
    return best if len(best) >= 3 else None


def _literal_runs(items: list[Any]) -> list[str]:
    runs: list[str] = []
    cur: list[str] = []

    def flush() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    for op, av in items:
        if op == _c.LITERAL and chr(av) not in _UNSAFE_ANCHOR_CHARS:
            cur.append(chr(av))
        elif op == _c.SUBPATTERN:
            # a mandatory group: its own runs count, but they do not join ours
            flush()
            runs.extend(_literal_runs(list(av[-1])))
        elif op in _REPEATS and av[0] >= 1:
            flush()
            runs.extend(_literal_runs(list(av[2])) if av[0] == av[1] == 1 else [])
        elif op == _c.AT:
            continue
        else:
            flush()
    flush()
    return runs
