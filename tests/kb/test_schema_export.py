"""The KB's JSON Schemas (docs/kb-schema/) are the code's, and an editor using them accepts
every shipped file and flags what `inferbot kb validate` would refuse for its shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from bot.authoring.schemas import DOCS, KINDS, json_schema, render
from bot.cli import main
from bot.kb.loader import SHIPPED


def shipped(kind: str) -> list[Path]:
    return sorted(SHIPPED.glob(KINDS[kind][0]))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_committed_schema_is_the_code_s(kind: str) -> None:
    path = DOCS / f"{kind}.schema.json"
    assert path.read_text(encoding="utf-8") == render(kind), (
        f"{path} is stale: regenerate it with `python -m bot.authoring.schemas`")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_shipped_file_passes_its_schema(kind: str) -> None:
    validator = jsonschema.Draft202012Validator(json_schema(kind))
    files = shipped(kind)
    assert files
    for path in files:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(data)]
        assert not errors, f"{path}: {errors}"


def test_an_editor_flags_a_misspelt_key_and_a_wrong_type() -> None:
    validator = jsonschema.Draft202012Validator(json_schema("problem"))
    data: dict[str, Any] = yaml.safe_load(shipped("problem")[0].read_text(encoding="utf-8"))
    data["signatures"][0]["wieght"] = 0.5
    data["memory_problem"] = "sometimes"
    messages = sorted(e.message for e in validator.iter_errors(data))
    assert any("'wieght' was unexpected" in m for m in messages)
    assert any("'sometimes' is not of type 'boolean'" in m for m in messages)


def test_kb_schema_prints_one_kind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kb", "schema", "examples"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json_schema("examples")
    assert set(printed["properties"]) >= {"problem", "cause", "match", "near_miss"}
