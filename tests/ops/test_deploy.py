"""The deployment files, read as data (Docker cannot run here): docker-compose.yml, the two
Dockerfiles, the demo inventory, and the README's configuration reference, checked against the
code they configure, so neither can drift from Settings."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.collect.inventory import load_inventory
from bot.config import Settings, env_names

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
BOTS = ("migrate", "bot", "bot-http")
ALL_ENV_NAMES = {name for field in Settings.model_fields for name in env_names(field)}


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_services_and_their_order_of_start() -> None:
    assert set(SERVICES) == {"postgres", "migrate", "bot", "bot-http", "gpu-demo"}
    assert SERVICES["migrate"]["command"] == ["db", "upgrade"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["bot"]["command"] == ["serve"]  # Socket Mode by default
    assert SERVICES["bot-http"]["command"][:2] == ["serve", "--http"]
    for name in ("bot", "bot-http"):
        deps = SERVICES[name]["depends_on"]
        assert deps["postgres"] == {"condition": "service_healthy"}
        assert deps["migrate"] == {"condition": "service_completed_successfully"}
        assert deps["gpu-demo"] == {"condition": "service_healthy"}


def test_health_checks_and_volumes() -> None:
    pg = SERVICES["postgres"]
    assert pg["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert "pgdata:/var/lib/postgresql/data" in pg["volumes"]
    assert {"pgdata", "bot-data", "demo-keys"} <= set(COMPOSE["volumes"])
    port = SERVICES["bot-http"]["command"][-1]
    assert f"http://127.0.0.1:{port}/healthz" in " ".join(SERVICES["bot-http"]["healthcheck"]
                                                          ["test"])
    # the demo host's health check is in its Dockerfile
    demo = ROOT / SERVICES["gpu-demo"]["build"]["dockerfile"]
    assert any(op == "HEALTHCHECK" for op, _ in instructions(demo))


@pytest.mark.parametrize("service", BOTS)
def test_bot_environment_names_are_settings(service: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    env = SERVICES[service]["environment"]
    unknown = sorted(set(env) - ALL_ENV_NAMES)
    assert not unknown, f"{service}: not Settings variables: {unknown}"
    for name, value in env.items():  # and the values (defaults of ${VAR:-x}) are valid
        default = re.fullmatch(r"\$\{[A-Z_]+:-(.*)\}", str(value))
        monkeypatch.setenv(name, default.group(1) if default else str(value))
    Settings()
    assert env["INFERBOT_DATABASE_URL"].startswith("postgresql://")
    assert {"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"} <= set(env)


def test_the_demo_inventory_is_mounted_and_parses() -> None:
    env = SERVICES["bot"]["environment"]
    mounts = dict(v.split(":")[1::-1] for v in SERVICES["bot"]["volumes"])
    source = mounts[env["INFERBOT_INVENTORY"]]
    inventory = load_inventory(ROOT / source)
    assert list(inventory.hosts) == ["gpu-demo"]
    assert SERVICES["gpu-demo"]["hostname"] == inventory.hosts["gpu-demo"].address
    assert "demo-keys" in mounts.get(inventory.data.known_hosts.rsplit("/", 1)[0], "")


def test_the_bot_image_is_slim_non_root_and_runs_inferbot() -> None:
    steps = instructions(ROOT / "Dockerfile")
    assert steps[0] == ("FROM", "python:3.11-slim")
    user = [arg for op, arg in steps if op == "USER"]
    assert user and user[-1] not in ("root", "0")
    # every dependency is a default one: a plain install of this checkout, no extra
    assert any(op == "RUN" and "pip install /src" in arg and "[" not in arg for op, arg in steps)
    assert ("ENTRYPOINT", '["inferbot"]') in steps


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "deploy/demo-gpu-host/Dockerfile"])
def test_every_copied_path_exists(dockerfile: str) -> None:
    for op, arg in instructions(ROOT / dockerfile):
        if op == "COPY":
            *sources, _dest = shlex.split(arg)
            for src in sources:
                assert (ROOT / src).exists(), f"{dockerfile}: COPY {src}: no such path"


def test_the_demo_host_uses_the_test_suites_stand_ins_not_copies() -> None:
    copies = [arg for op, arg in instructions(ROOT / "deploy/demo-gpu-host/Dockerfile")
              if op == "COPY"]
    assert any(c.startswith("tests/collect/standins/") for c in copies)
    assert any(c.startswith("tests/collect/data/") for c in copies)
    assert not list((ROOT / "deploy").rglob("nvidia-smi"))


def test_every_setting_is_in_the_readme_configuration_reference() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("### Configuration reference", 1)[1]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([A-Z][A-Z_]+)`",
                                                                row.split("|")[1])}
    missing = {f: env_names(f) for f in Settings.model_fields
               if not set(env_names(f)) <= documented}
    assert not missing, f"README configuration reference lacks {missing}"
    assert documented <= ALL_ENV_NAMES, documented - ALL_ENV_NAMES
