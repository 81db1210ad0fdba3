"""The answers the shipped inputs get are the ones recorded in golden.json (see golden.py for
what is recorded, what is left out and how it is regenerated): a refactor that changes any
`--json` output, or the text answer to a shipped example log, fails here with the input's id."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.contract.golden import GOLDEN, Case, canonical, cases, run

RECORDED: dict[str, dict[str, object]] = json.loads(GOLDEN.read_text(encoding="utf-8"))
CASES = {c.id: c for c in cases()}


def test_every_recorded_input_is_still_shipped() -> None:
    """A recorded input that disappeared would shrink the comparison without saying so."""
    assert sorted(set(RECORDED) - set(CASES)) == []


@pytest.mark.parametrize("case_id", sorted(set(RECORDED) & set(CASES)))
def test_output_is_unchanged(case_id: str) -> None:
    case: Case = CASES[case_id]
    want = RECORDED[case_id]
    rc, output = run(case)
    text = canonical(case, output)
    assert rc == want["rc"]
    if "output" in want:  # kept whole: a difference shows as a readable diff
        shown = json.loads(text) if "--json" in case.argv else text.splitlines()
        assert shown == want["output"]
    assert hashlib.sha256(text.encode()).hexdigest() == want["sha256"], (
        f"{case_id}: the output differs from the recorded one; `python -B -m "
        "tests.contract.golden --dump DIR` on the base commit and on this tree shows how")
