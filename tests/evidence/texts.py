"""Every line the tests have: KB excerpts (matches and near-misses), the public corpus's
pastes, the labelled incidents, the shipped examples and a generated busy server's log of
every shape. What a check over "any real line" reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from bot.kb.loader import load_kb
from tests.corpus.score import load_cases
from tests.evidence import serverlog

ROOT = Path(__file__).resolve().parents[2]


def every_line() -> list[str]:
    return list(dict.fromkeys(_lines()))


def _lines() -> Iterator[str]:
    for exset in load_kb().examples.values():
        for ex in (*exset.match, *exset.near_miss):
            yield from ex.text.splitlines()
    for case in load_cases():
        yield from case["text"].splitlines()
    for row in (ROOT / "tests" / "data" / "dev_incidents.jsonl").read_text().splitlines():
        if row.strip():
            yield from json.loads(row)["text"].splitlines()
    for path in sorted((ROOT / "examples").glob("*.log")):
        yield from path.read_text().splitlines()
    yield from serverlog.lines(3000, 1.0, mix=serverlog.EVERY_SHAPE)
