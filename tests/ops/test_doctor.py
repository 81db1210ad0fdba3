"""`inferbot doctor`: each broken setting of a broken configuration is one finding naming its
variable; a sound configuration passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.config import Settings
from bot.doctor import (
    Finding,
    check_database,
    check_inventory,
    check_kb,
    check_slack,
    check_spool,
    check_tokens,
    failed,
    load_settings,
    run_all,
)
from tests.fixtures.slack import ROOT, serve_env
from tests.slack.fakes import APP_TOKEN, BOT_TOKEN, FakeSlack

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def inventory(tmp_path: Path, hosts: list[str], known: list[str]) -> Path:
    """An inventory of `hosts` (port 22) whose known_hosts has keys for `known` only."""
    (tmp_path / "known_hosts").write_text("".join(f"{h} {KEY}\n" for h in known))
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({
        "known_hosts": str(tmp_path / "known_hosts"), "ssh_config": str(tmp_path / "none"),
        "hosts": [{"name": h, "address": h, "user": "ops"} for h in hosts]}))
    return path


def broken_kb(tmp_path: Path) -> Path:
    site = tmp_path / "site-kb"
    (site / "problems").mkdir(parents=True)
    (site / "problems" / "ours.yaml").write_text("id: ours\nrevision: 1\ntitle: Ours\n"
                                                 "no_such_key: 1\n")
    return site


def fails(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if f.level == "fail"]


@pytest.mark.slow
def test_a_broken_configuration_gets_one_finding_per_broken_setting(
        fake: FakeSlack, tmp_path: Path) -> None:
    env = serve_env(
        fake, tmp_path,
        SLACK_BOT_TOKEN="xoxp-a-user-token", SLACK_APP_TOKEN="xoxb-not-an-app-token",
        INFERBOT_DATABASE_URL="postgresql://inferbot:pw@127.0.0.1:9/inferbot",
        INFERBOT_INVENTORY=str(inventory(tmp_path, ["gpu-01", "gpu-02"], ["gpu-01"])),
        INFERBOT_KB_PATH=str(broken_kb(tmp_path)), INFERBOT_WORKERS="lots")
    del env["SLACK_SIGNING_SECRET"]
    done = subprocess.run([sys.executable, "-m", "bot.cli", "doctor", "--http"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("FAIL")]
    expected = {  # what each line must name
        "config": ["INFERBOT_WORKERS=lots", "whole number"],
        "tokens": ["SLACK_BOT_TOKEN", "user token", "xoxb-"],
        "tokens ": ["SLACK_APP_TOKEN", "xapp-"],
        "tokens  ": ["SLACK_SIGNING_SECRET", "HTTP mode"],
        "database": ["INFERBOT_DATABASE_URL", "127.0.0.1:9"],
        "inventory": ["INFERBOT_INVENTORY", "gpu-02", "ssh-keyscan gpu-02"],
        "kb": ["INFERBOT_KB_PATH", "ours.yaml"],
    }
    assert len(lines) == len(expected), done.stdout
    for area, words in expected.items():
        matching = [ln for ln in lines if ln.startswith(f"FAIL {area.strip()}:")
                    and all(w in ln for w in words)]
        assert len(matching) == 1, (area, lines)
    assert "pw@" not in done.stdout  # the database password is not printed
    assert done.stdout.strip().endswith("7 problem(s) to fix")


@pytest.mark.slow
def test_a_sound_configuration_passes(fake: FakeSlack, tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    env = serve_env(fake, tmp_path, SLACK_APP_TOKEN=APP_TOKEN,
                    INFERBOT_INVENTORY=str(inventory(tmp_path, ["gpu-01"], ["gpu-01"])))
    subprocess.run([sys.executable, "-m", "bot.cli", "db", "upgrade"], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=60)
    done = subprocess.run([sys.executable, "-m", "bot.cli", "doctor", "-v"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip().endswith("all checks passed")
    assert f"{db} reachable, schema at revision" in done.stdout
    assert "auth.test: bot" in done.stdout and fake.recorder.of("auth.test")


def test_tokens_by_mode() -> None:
    socket = Settings(INFERBOT_BOT_TOKEN=BOT_TOKEN)
    assert fails(check_tokens(socket, http=False)) == [
        "Socket Mode needs SLACK_APP_TOKEN (xapp-..., scope connections:write); or run "
        "`inferbot serve --http` with SLACK_SIGNING_SECRET"]
    http = Settings(INFERBOT_BOT_TOKEN=BOT_TOKEN, INFERBOT_SIGNING_SECRET="s3cret")
    assert fails(check_tokens(http, http=True)) == []
    swapped = Settings(INFERBOT_BOT_TOKEN=APP_TOKEN, INFERBOT_APP_TOKEN=BOT_TOKEN)
    assert len(fails(check_tokens(swapped, http=False))) == 2


@pytest.mark.slow
def test_unreachable_slack_is_a_warning_not_a_failure() -> None:
    s = Settings(INFERBOT_BOT_TOKEN=BOT_TOKEN, slack_api_url="http://127.0.0.1:9/api/")
    [finding] = check_slack(s, timeout_s=2)
    assert finding.level == "warn" and "INFERBOT_SLACK_API_URL" in finding.message


def test_a_database_behind_head_says_run_db_upgrade(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    sqlite3.connect(db).close()  # exists, no schema
    [finding] = check_database(Settings(database_url=f"sqlite:///{db}"))
    assert finding.level == "fail" and "run `inferbot db upgrade`" in finding.message
    [missing] = check_database(Settings(database_url=f"sqlite:///{tmp_path / 'none.db'}"))
    assert missing.level == "warn" and not (tmp_path / "none.db").exists()


def test_a_jump_host_needs_a_key_too(tmp_path: Path) -> None:
    path = inventory(tmp_path, ["gpu-01", "bastion"], ["gpu-01"])
    data = yaml.safe_load(path.read_text())
    data["hosts"][0]["jump"] = "bastion"
    path.write_text(yaml.safe_dump(data))
    messages = fails(check_inventory(Settings(inventory=path)))
    assert len(messages) == 2 and any("jump host of gpu-01" in m for m in messages)


@pytest.mark.slow
def test_the_shipped_kb_is_sound(tmp_path: Path) -> None:
    assert not failed(check_kb(Settings()))
    [bad] = check_kb(Settings(kb_path=str(broken_kb(tmp_path))))
    assert bad.level == "fail" and "INFERBOT_KB_PATH" in bad.message


def test_an_invalid_variable_falls_back_so_the_other_checks_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBOT_WORKERS", "0")
    monkeypatch.setenv("INFERBOT_LOG_LEVEL", "chatty")
    settings, findings = load_settings()
    assert settings.workers == 4 and settings.log_level == "INFO"
    assert fails(findings) == [
        "INFERBOT_WORKERS=0: expected a number at least 1",
        "INFERBOT_LOG_LEVEL=chatty: expected one of 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"]


def test_incidents_waiting_in_the_spool_are_reported(tmp_path: Path) -> None:
    from bot.store.spool import write

    settings = Settings(spool_dir=tmp_path / "spool")
    assert [f.level for f in check_spool(settings)] == ["ok"]
    write(settings.spool_dir, {"kind": "event", "uid": "u1", "created_at": "2026-11-30T06:00"})
    [finding] = check_spool(settings)
    assert finding.level == "warn" and "INFERBOT_SPOOL_DIR" in finding.message
    assert "1 incident(s) wait" in finding.message


@pytest.mark.parametrize(("url", "words"), [
    ("mysql://u@db.example.com/inferbot", ["unsupported scheme mysql://"]),
    ("mongodb://db.example.com/inferbot", ["unsupported scheme mongodb://"]),
    ("postgresq://u:pw@db/inferbot", ["postgresq://", "did you mean postgresql://?"]),
    ("db.example.com/inferbot", ["not a database URL"]),
])
def test_an_unsupported_database_url_is_named_with_the_schemes_that_work(
        url: str, words: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBOT_DATABASE_URL", url)
    _settings, findings = load_settings()
    [config] = [f for f in findings if f.level == "fail"]
    assert config.message.startswith("INFERBOT_DATABASE_URL=")
    assert all(w in config.message for w in words), config.message
    assert "sqlite:///PATH or postgresql://" in config.message
    assert "pw@" not in config.message  # a password in the URL is never shown
    assert "driver" not in config.message and "module" not in config.message


def test_a_check_whose_variable_is_invalid_is_not_run_on_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The invalid variable is the finding; the default that stands in for it (the SQLite
    file, slack.com) is not checked as if it were the configuration."""
    monkeypatch.setenv("INFERBOT_DATABASE_URL", "mysql://u@db.example.com/inferbot")
    monkeypatch.setenv("INFERBOT_SLACK_API_URL", "slack.com/api")
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    findings = run_all(http=True, slack_timeout_s=0.5)
    assert fails([f for f in findings if f.area == "config"]) == [
        "INFERBOT_DATABASE_URL=mysql://u@db.example.com/inferbot: unsupported scheme mysql://: "
        "supported are sqlite:// and postgresql:// (also postgres://), e.g. sqlite:///PATH or "
        "postgresql://USER:PASSWORD@HOST/DB",
        "INFERBOT_SLACK_API_URL=slack.com/api: expected an http:// or https:// URL of the "
        "Slack Web API, e.g. https://slack.com/api/"]
    assert not [f for f in findings if f.area in ("database", "slack")]
    assert {"spool", "inventory", "kb"} <= {f.area for f in findings}
