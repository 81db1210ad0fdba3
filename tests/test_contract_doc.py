"""The JSON contract's page and schema are the code's (bot.contract), and what the command line
prints for the shipped example is valid against that schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bot.cli import main
from bot.contract import SCHEMA_FILE, json_schema, markdown

ROOT = Path(__file__).resolve().parent.parent


def test_the_contract_page_and_schema_are_the_code_s() -> None:
    page = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    assert markdown() in page, "docs/contracts.md is stale: regenerate with python -m bot.contract"
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json_schema()


def test_the_shipped_example_s_json_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(ROOT / "examples" / "vllm-max-model-len.log"), "--json",
                 "--no-store"]) == 0
    printed = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(json_schema()).validate(printed)
    assert printed["fingerprint"] and isinstance(printed["fingerprint"], str)


def test_every_field_of_the_diagnosis_is_on_the_page() -> None:
    page = markdown()
    for field in json_schema()["properties"]:
        assert f"| `{field}` |" in page
