"""The literals every match of a pattern holds: a probe runs only on lines holding one, so a
set that missed a match would lose a reading. Checked on every pattern folding probes, over
every text the tests have."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from bot.evidence import EXTRACTORS, mentions, sglang, tgi, torch, vllm
from bot.evidence.literals import literal_prefix, required_literals
from bot.evidence.rules import Rules
from bot.kb.loader import load_kb
from bot.kb.match import CompiledKB
from bot.lazyre import LazyPattern
from tests.evidence.texts import every_line


@pytest.mark.parametrize(("pattern", "flags", "expected"), [
    ("Available KV cache memory", 0, {"Available KV cache memory"}),
    # a mandatory repeat lends its first copy: one of ten digits
    ("max seq len \\((?:\\d{1,8})\\)", 0, {f"max seq len ({d}" for d in "0123456789"}),
    ("a(?:bc|de)f", 0, {"abcf", "adef"}),
    ("Llama|Qwen", re.IGNORECASE, {"llama", "qwen"}),
    ("[AB]\\d{1,4}", 0, {f"{c}{d}" for c in "AB" for d in "0123456789"}),
    ("(?:GiB)? total", 0, {" total"}),
])
def test_sets(pattern: str, flags: int, expected: set[str]) -> None:
    assert required_literals(pattern, flags) == frozenset(expected)


@pytest.mark.parametrize("pattern", [
    r"\d{1,8}", r"[^\n]{0,80}", r"x?y?", r"(?:abc|\w{1,9})", r"(?i:abc)d", r"a",
])
def test_no_set_where_none_is_certain(pattern: str) -> None:
    assert required_literals(pattern) is None


def _patterns() -> Iterator[LazyPattern]:
    compiled = CompiledKB(load_kb())
    for cs in compiled.signatures:
        yield cs.regex
        yield from cs.with_any
    yield from (p for p, _ in compiled.contexts)
    for module in (vllm, sglang, tgi, torch, mentions, *EXTRACTORS):
        for value in vars(module).values():
            if isinstance(value, LazyPattern):
                yield value
            elif isinstance(value, Rules):
                yield from (r.pattern for r in value)


@pytest.mark.slow
def test_every_match_holds_one_of_its_literals() -> None:
    lines = every_line()
    checked = 0
    for pattern in dict.fromkeys(_patterns()):
        needs = required_literals(pattern.pattern, pattern.flags)
        if needs is None:
            continue
        lower = bool(pattern.compiled.flags & re.IGNORECASE)
        for line in lines:
            if pattern.search(line):
                text = line.lower() if lower else line
                assert any(n in text for n in needs), (pattern.pattern, line)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize(("pattern", "flags", "expected"), [
    ("is preempted by", 0, True), ("(?P<x>GPU) KV", 0, True), (r"(?<![\w-])A100", 0, False),
    ("[AH]100", 0, False), ("llama", re.IGNORECASE, False),
])
def test_a_literal_start_is_told(pattern: str, flags: int, expected: bool) -> None:
    """re searches a pattern that starts with a literal fast by itself: no prefilter needed."""
    assert literal_prefix(pattern, flags) is expected
