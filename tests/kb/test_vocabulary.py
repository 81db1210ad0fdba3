"""The names a KB entry may use are declared once (bot.kb.vocabulary) and implemented by the
sizing side, the two sets equal; the authors' page (docs/kb-authoring.md) carries exactly what
`python -m bot.authoring.vocabulary` prints from them and the shipped KB."""

from __future__ import annotations

from pathlib import Path

from bot.authoring.vocabulary import condition_uses, markdown
from bot.kb.loader import load_kb
from bot.kb.vocabulary import CONDITIONS, PLANNED_VALUES
from bot.schema import field_names
from bot.sizing import checks
from bot.sizing.plan import Planned

DOC = Path(__file__).resolve().parents[2] / "docs" / "kb-authoring.md"


def test_the_contracts_page_lists_the_code_s_vocabulary() -> None:
    assert markdown(load_kb(use_cache=False)) in DOC.read_text(encoding="utf-8"), (
        "docs/kb-authoring.md is stale: regenerate it with `python -m bot.authoring.vocabulary`")


def test_every_registered_condition_is_used_by_the_kb() -> None:
    unused = [name for name, uses in condition_uses(load_kb(use_cache=False)).items() if not uses]
    assert not unused


def test_every_declared_condition_is_implemented_and_nothing_else() -> None:
    assert set(checks.CONDITIONS) == CONDITIONS


def test_every_declared_planned_value_is_computed_and_nothing_else() -> None:
    assert set(field_names(Planned)) == set(PLANNED_VALUES)

