"""Every excerpt the KB ships is its own test: `kv-cache-no-blocks/match/3` must name its
problem (or support its cause), `kv-cache-no-blocks/near_miss/1` must not. A failure names the
file, the line and what was found instead."""

from __future__ import annotations

import pytest

from bot.authoring.examples import check_example, example_ids
from bot.kb.loader import load_kb
from bot.kb.match import CompiledKB

KB = load_kb(use_cache=False)
COMPILED = CompiledKB(KB)
IDS = example_ids(KB)


@pytest.mark.parametrize(("owner", "kind", "index"), IDS,
                         ids=[f"{o}/{k}/{i}" for o, k, i in IDS])
def test_shipped_example(owner: str, kind: str, index: int) -> None:
    result = check_example(KB, COMPILED, owner, kind, index)
    assert result.ok, result.message()
