"""Aho-Corasick finders, built once per process.

A DFA over a thousand anchors takes tens of milliseconds to build (a ContiguousNFA about one,
and it scans at about half the speed); the bot scans many inputs with the same anchors, so a
finder is kept for the next scan.
"""

from __future__ import annotations

from ahocorasick_rs import BytesAhoCorasick, Implementation

_BUILT: dict[tuple[tuple[bytes, ...], bool], BytesAhoCorasick] = {}
_KEPT = 32


def automaton(needles: tuple[bytes, ...], dfa: bool) -> BytesAhoCorasick:
    """A finder of `needles` (standard match kind: any match, earliest end first)."""
    key = (needles, dfa)
    found = _BUILT.get(key)
    if found is None:
        if len(_BUILT) >= _KEPT:
            _BUILT.clear()
        found = _BUILT[key] = BytesAhoCorasick(
            list(needles),
            implementation=Implementation.DFA if dfa else Implementation.ContiguousNFA)
    return found
