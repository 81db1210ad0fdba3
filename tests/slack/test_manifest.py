"""The app manifests validate against Slack's manifest schema (kept here as data), the two
variants differ only in transport, and every scope is one the bot uses (and vice versa).

`jsonschema` is not installed in this project; the small validator below covers the keywords
the schema file uses, and a test proves it rejects what it should.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "manifest.schema.json").read_text())
TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "integer": int}


def errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """JSON Schema (the subset in manifest.schema.json): type, required, properties,
    additionalProperties, items, min/maxItems, uniqueItems, min/maxLength, pattern, minimum."""
    where = path or "/"
    expected = schema.get("type")
    if expected:
        ok = isinstance(value, TYPES[expected]) and not (
            expected == "integer" and isinstance(value, bool))
        if not ok:
            return [f"{where}: expected {expected}, got {type(value).__name__}"]
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if key in props:
                out += errors(item, props[key], f"{path}/{key}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{where}: unknown key {key}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            out.append(f"{where}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems") and len({json.dumps(v) for v in value}) != len(value):
            out.append(f"{where}: duplicate items")
        for i, item in enumerate(value):
            out += errors(item, schema.get("items", {}), f"{path}/{i}")
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            out.append(f"{where}: longer than {schema['maxLength']}")
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: does not match {schema['pattern']}")
    if isinstance(value, int) and value < schema.get("minimum", value):
        out.append(f"{where}: below {schema['minimum']}")
    return out


def manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / name).read_text())
    return data


@pytest.mark.parametrize("name", ["manifest.yml", "manifest.http.yml"])
def test_manifest_validates(name: str) -> None:
    assert errors(manifest(name), SCHEMA) == []


def test_the_validator_rejects_what_slack_rejects() -> None:
    bad = manifest("manifest.yml")
    bad["features"]["slash_commands"][0]["command"] = "inferbot"
    bad["display_information"]["name"] = "x" * 36
    bad["settings"]["interactivity"] = {}
    bad["settings"]["socket_mode"] = True
    found = errors(bad, SCHEMA)
    assert len(found) == 4, found


def test_the_variants_differ_only_in_transport() -> None:
    sock, http = manifest("manifest.yml"), manifest("manifest.http.yml")
    assert sock["settings"]["socket_mode_enabled"] is True
    assert http["settings"]["socket_mode_enabled"] is False
    url = "https://inferbot.example.com/slack/events"
    assert http["settings"]["event_subscriptions"].pop("request_url") == url
    assert http["settings"]["interactivity"].pop("request_url") == url
    assert http["features"]["slash_commands"][0].pop("url") == url
    http["settings"]["socket_mode_enabled"] = True
    assert sock == http


def test_scopes_are_exactly_what_the_bot_uses() -> None:
    needed = {
        "app_mentions:read": "app_mention event",
        "chat:write": "chat.postMessage, chat.update, chat.postEphemeral",
        "commands": "/inferbot",
        "files:read": "files.info, snippet download",
        "files:write": "files.getUploadURLExternal, files.completeUploadExternal",
        "usergroups:read": "usergroups.users.list",
    }
    m = manifest("manifest.yml")
    assert sorted(m["oauth_config"]["scopes"]["bot"]) == sorted(needed)
    assert m["features"]["slash_commands"][0]["command"] == "/inferbot"
    assert set(m["settings"]["event_subscriptions"]["bot_events"]) == {
        "app_mention", "app_home_opened"}
