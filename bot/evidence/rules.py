"""Keyword-gated patterns: the shape every line-oriented extractor shares.

A rule runs its regex only when its literal keyword is in the line, so an extractor that knows
thirty log lines costs thirty substring checks per offered line, not thirty regex searches. The
keywords double as the extractor's scanner anchors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from bot.evidence.base import FactSink, Fold, Line, Probe
from bot.evidence.units import convert, put
from bot.lazyre import LazyPattern, lazy
from bot.structs import struct


@struct(frozen=True, slots=True)
class Rule:
    """A fact read by a regex: the keyword it sets and how it merges with earlier values."""
    keyword: str
    pattern: LazyPattern
    # Lowest priority: only fills a fact nothing else has set (a hint, a guess from a path).
    default: bool = False
    # Keeps the largest value seen instead of the last (peaks such as KV cache usage).
    peak: bool = False
    # Groups that are only a hint here (the device total inside an OOM message).
    weak: frozenset[str] = frozenset()


def rule(keyword: str, pattern: str, *, default: bool = False, peak: bool = False,
         weak: tuple[str, ...] = ()) -> Rule:
    return Rule(keyword, lazy(pattern), default, peak, frozenset(weak))


class Rules:
    """An extractor's rules, grouped by keyword so each keyword is looked for once per line."""

    def __init__(self, *rules: Rule) -> None:
        self.rules = rules
        groups: dict[str, list[Rule]] = {}
        for r in rules:
            groups.setdefault(r.keyword, []).append(r)
        self._groups = tuple((k, tuple(v)) for k, v in groups.items())

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    @property
    def keywords(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self._groups)

    def fold(self, keys: Sequence[str] = (),
             gated: Sequence[tuple[Sequence[str], LazyPattern]] = ()) -> Fold:
        """How an extractor that reads a line with these rules folds (bot.evidence.base.Fold):
        each rule is gated by its keyword (the first and the latest match set facts; a peak,
        its highest). `keys`: the extractor's other literals whose presence changes its reading
        the same way on every line holding one (markers, engine names); `gated`: its other
        patterns, each run only where one of its literals is."""
        gates = [(r.keyword, Probe(r.pattern, peak=r.peak)) for r in self.rules]
        gates += [(k, probe) for literals, pattern in gated
                  for probe in (Probe(pattern),) for k in literals]
        return Fold(gates=tuple(gates), keys=tuple(keys))

    def apply(self, line: Line, sink: FactSink) -> bool:
        """Run every rule whose keyword is in the line; True if any matched."""
        hit = False
        text = line.text
        for keyword, rules in self._groups:
            if keyword not in text:
                continue
            for r in rules:
                m = r.pattern.search(text)
                if m is None:
                    continue
                hit = True
                if r.peak:
                    _put_peak(sink, m, line.no)
                else:
                    put(sink, m, line.no, default=r.default, weak=r.weak)
        return hit


def _put_peak(sink: FactSink, m: re.Match[str], line_no: int) -> None:
    for name, raw in m.groupdict().items():
        value = None if raw is None else convert(name, raw)
        old = sink.get(name)
        if value is not None and (old is None or value > old):
            sink.set(name, value, line_no)
