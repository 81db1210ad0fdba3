"""The public corpus as a regression test: every real paste gets its labelled problem, no
memory claim on a paste whose problem is not GPU memory, and the expected root cause in the top
two, except the cases known_misses.txt lists with why. A listed case that starts passing
fails too, so the list is kept honest and only shrinks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.kb.loader import KB, load_kb
from tests.corpus.score import judge, load_cases, memory_problems, run

KNOWN = Path(__file__).with_name("known_misses.txt")
CASES = load_cases()


def known_misses() -> set[tuple[str, str]]:
    out = set()
    for line in KNOWN.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            case_id, kind = line.split()
            out.add((case_id, kind))
    return out


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


def test_the_corpus_is_well_formed() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 200
    assert sum(1 for c in CASES if c["messiness"]) >= 60
    assert sum(1 for c in CASES if not c["memory"]) >= 60
    for c in CASES:
        assert c["url"].startswith("https://") and c["text"].strip() and c["why"], c["id"]
    assert {cid for cid, _ in known_misses()} <= set(ids)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(kb: KB, case: dict[str, Any]) -> None:
    v = judge(case, run(case, kb), memory_problems(kb))
    failing = {kind for kind, bad in (("problem", not v.problem_ok),
                                      ("memory", bool(v.false_memory)),
                                      ("cause", v.cause_ok is False)) if bad}
    expected = {kind for cid, kind in known_misses() if cid == case["id"]}
    assert failing == expected, (
        f"{case['id']}: top {v.top}, causes {v.causes[:3]}, false memory {v.false_memory}; "
        f"fails {sorted(failing)}, known_misses.txt says {sorted(expected)}")
