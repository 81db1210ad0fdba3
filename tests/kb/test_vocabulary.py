"""The KB authors' vocabulary page is the code's: docs/kb-authoring.md carries exactly what
`python -m bot.authoring.vocabulary` prints from the registered conditions and the shipped KB."""

from __future__ import annotations

from pathlib import Path

from bot.authoring.vocabulary import condition_uses, markdown
from bot.kb.loader import load_kb

DOC = Path(__file__).resolve().parents[2] / "docs" / "kb-authoring.md"


def test_the_contracts_page_lists_the_code_s_vocabulary() -> None:
    assert markdown(load_kb(use_cache=False)) in DOC.read_text(encoding="utf-8"), (
        "docs/kb-authoring.md is stale: regenerate it with `python -m bot.authoring.vocabulary`")


def test_every_registered_condition_is_used_by_the_kb() -> None:
    unused = [name for name, uses in condition_uses(load_kb(use_cache=False)).items() if not uses]
    assert not unused
