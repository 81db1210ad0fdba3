"""What every match of a pattern must contain: the literals a probe is prefiltered by.

A pattern without a literal prefix (a GPU name, a model name) costs `re` a test at every
position of a line. Folding a family's lines (bot.evidence.fold) runs consumers' patterns over
all of them; knowing strings one of which every match holds, and finding those first with one
automaton pass, a pattern runs only on the lines that hold one. The set is derived from the
parsed pattern, so it holds for any pattern an extractor or the KB adds.
"""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]  # re's own parser (3.11+)
import re._parser as _p  # type: ignore[import-not-found]
from functools import cache
from typing import Any

MAX_STRINGS = 256  # a larger set costs more than the pattern it would spare
MIN_BYTES = 2  # a single character is in nearly every line
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)} - {None}
_ZERO_WIDTH = {_c.AT, _c.ASSERT, _c.ASSERT_NOT}
_MAX_CLASS = 64
_MAX_COPIES = 4

Strings = frozenset[str]


@cache
def required_literals(pattern: str, flags: int = 0) -> Strings | None:
    """Strings one of which every match of `pattern` contains, lower-cased when the pattern
    ignores case (to be looked for in lower-cased text); None where no set of strings of
    MIN_BYTES or more is certain."""
    parsed = _p.parse(pattern, flags)
    if _adds_flags(list(parsed)):
        return None  # a scoped (?i:...) would need part of the set lower-cased
    found = _required(list(parsed))
    if found is None or _shortest(found) < MIN_BYTES:
        return None
    if parsed.state.flags & re.IGNORECASE:
        found = frozenset(s.lower() for s in found)
    return found


@cache
def literal_prefix(pattern: str, flags: int = 0) -> bool:
    """Whether every match of `pattern` starts with the same character, which `re` finds with
    a fast search before it tries anything else."""
    items = list(_p.parse(pattern, flags))
    while items and items[0][0] == _c.SUBPATTERN and not (items[0][1][1] or items[0][1][2]):
        items = list(items[0][1][-1]) + items[1:]
    return bool(items) and items[0][0] == _c.LITERAL and not flags & re.IGNORECASE


def _required(items: list[Any]) -> Strings | None:
    """The best set for a sequence: a run of items each matching one of few strings, or a
    mandatory part's own set."""
    candidates: list[Strings] = []
    exact = [_exact(op, av) for op, av in items]
    # a repeat of at least one copy begins with one copy, whatever follows
    heads = [_exact_seq(list(av[2])) if op in _REPEATS and av[0] >= 1 else None
             for op, av in items]
    for i in range(len(items)):
        acc: Strings = frozenset({""})
        for e, head in zip(exact[i:], heads[i:], strict=True):
            last = e is None or len(acc) * len(e) > MAX_STRINGS
            part = head if last else e
            if part is None or len(acc) * len(part) > MAX_STRINGS:
                break
            acc = frozenset(a + b for a in acc for b in part)
            candidates.append(acc)
            if last:
                break
    for op, av in items:
        sub: Strings | None = None
        if op == _c.SUBPATTERN:
            sub = _required(list(av[-1]))
        elif op == _c.BRANCH:
            parts = [_required(list(b)) for b in av[1]]
            if all(p is not None for p in parts):
                sub = frozenset().union(*parts)  # type: ignore[arg-type]
        elif op in _REPEATS and av[0] >= 1:
            sub = _required(list(av[2]))
        elif op == getattr(_c, "ATOMIC_GROUP", None):
            sub = _required(list(av))
        if sub is not None and len(sub) <= MAX_STRINGS:
            candidates.append(sub)
    if not candidates:
        return None
    return max(candidates, key=lambda s: (_shortest(s), -len(s)))


def _shortest(strings: Strings) -> int:
    return min((len(s.encode()) for s in strings), default=0)


def _exact(op: Any, av: Any) -> Strings | None:
    """The few strings an item matches, or None where they are many or unbounded."""
    if op == _c.LITERAL:
        return frozenset({chr(av)})
    if op == _c.IN:
        return _class(av)
    if op in _ZERO_WIDTH:
        return frozenset({""})
    if op == _c.SUBPATTERN:
        return _exact_seq(list(av[-1]))
    if op == getattr(_c, "ATOMIC_GROUP", None):
        return _exact_seq(list(av))
    if op == _c.BRANCH:
        parts = [_exact_seq(list(b)) for b in av[1]]
        if any(p is None for p in parts):
            return None
        union: Strings = frozenset().union(*parts)  # type: ignore[arg-type]
        return union if len(union) <= MAX_STRINGS else None
    if op in _REPEATS:
        lo, hi, body = av
        one = _exact_seq(list(body))
        if one is None or hi > _MAX_COPIES:
            return None
        out: set[str] = set()
        acc: Strings = frozenset({""})
        for k in range(hi + 1):
            if k >= lo:
                out |= acc
            acc = frozenset(a + b for a in acc for b in one)
            if len(out) + len(acc) > MAX_STRINGS:
                return None
        return frozenset(out)
    return None


def _exact_seq(items: list[Any]) -> Strings | None:
    acc: Strings = frozenset({""})
    for op, av in items:
        e = _exact(op, av)
        if e is None:
            return None
        acc = frozenset(a + b for a in acc for b in e)
        if len(acc) > MAX_STRINGS:
            return None
    return acc


def _class(items: list[Any]) -> Strings | None:
    chars: set[str] = set()
    for op, av in items:
        if op == _c.LITERAL:
            chars.add(chr(av))
        elif op == _c.RANGE and av[1] - av[0] < _MAX_CLASS:
            chars.update(chr(c) for c in range(av[0], av[1] + 1))
        elif op == _c.CATEGORY and av == _c.CATEGORY_DIGIT:
            chars.update("0123456789")
        else:
            return None  # negated, \w, \s, a wide range
    return frozenset(chars) if len(chars) <= _MAX_CLASS else None


def _adds_flags(items: list[Any]) -> bool:
    """Whether a group inside sets or clears flags, as `(?i:...)` does."""
    for op, av in items:
        if op == _c.SUBPATTERN and (av[1] or av[2]):
            return True
        if any(_adds_flags(list(sub)) for sub in _children(op, av)):
            return True
    return False


def _children(op: Any, av: Any) -> list[Any]:
    if op == _c.SUBPATTERN:
        return [av[-1]]
    if op == _c.BRANCH:
        return list(av[1])
    if op in _REPEATS:
        return [av[2]]
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return [av[1]]
    if op == getattr(_c, "ATOMIC_GROUP", None):
        return [av]
    return []
