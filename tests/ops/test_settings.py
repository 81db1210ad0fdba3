"""Configuration: the environment, then the optional settings file; every error names the
variable and what it expects, in one line, from any command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.collect.inventory import default_path
from bot.config import Settings, raw_setting
from bot.doctor import check_sources
from bot.kb.loader import kb_roots
from tests.fixtures.slack import ROOT


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "inferbot.env"
    path.write_text("INFERBOT_WORKERS=7\nSLACK_BOT_TOKEN=xoxb-from-the-file\n"
                    f"INFERBOT_INVENTORY={tmp_path / 'hosts.yaml'}\n"
                    f"INFERBOT_KB_PATH={tmp_path / 'site'}\n")
    monkeypatch.setenv("INFERBOT_CONFIG", str(path))
    for name in ("INFERBOT_WORKERS", "SLACK_BOT_TOKEN", "INFERBOT_BOT_TOKEN",
                 "INFERBOT_INVENTORY", "INFERBOT_KB_PATH"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_the_settings_file_is_read_and_the_environment_wins(
        config_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert s.workers == 7 and s.bot_token is not None
    assert s.bot_token.get_secret_value() == "xoxb-from-the-file"
    monkeypatch.setenv("INFERBOT_WORKERS", "9")
    assert Settings().workers == 9
    monkeypatch.setenv("INFERBOT_WORKERS", "")  # empty means unset: the file's value
    assert Settings().workers == 7


def test_the_collector_and_the_kb_loader_see_the_file_too(config_file: Path) -> None:
    assert default_path() == config_file.parent / "hosts.yaml"
    assert kb_roots()[-1] == config_file.parent / "site"
    assert raw_setting("INFERBOT_MAX_FILE_BYTES") is None


def test_the_default_file_is_in_the_config_directory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "inferbot").mkdir()
    (tmp_path / "inferbot" / "inferbot.env").write_text("INFERBOT_LOG_FORMAT=json\n")
    assert Settings().log_format == "json"


def test_doctor_flags_a_missing_file_and_misspelt_names(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBOT_CONFIG", str(tmp_path / "nope.env"))
    [missing] = check_sources()
    assert missing.level == "fail" and missing.message.startswith("INFERBOT_CONFIG=")
    path = tmp_path / "inferbot.env"
    path.write_text("INFERBOT_WORKER=8\n")
    monkeypatch.setenv("INFERBOT_CONFIG", str(path))
    monkeypatch.setenv("INFERBOT_LOGLEVEL", "debug")
    warnings = [f.message for f in check_sources() if f.level == "warn"]
    assert "INFERBOT_WORKER is not an inferbot setting and is ignored; did you mean " \
           "INFERBOT_WORKERS?" in warnings
    assert any(w.startswith("INFERBOT_LOGLEVEL ") and "INFERBOT_LOG_LEVEL" in w
               for w in warnings)


@pytest.mark.parametrize("argv", [["history"], ["db", "upgrade"], ["serve", "--http"]])
def test_an_invalid_variable_is_one_line_naming_it(argv: list[str], tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "INFERBOT_WORKERS": "lots",
           "PYTHONDONTWRITEBYTECODE": "1",
           "SLACK_BOT_TOKEN": "xoxb-secret-never-shown", "INFERBOT_MAX_FILE_BYTES": "12"}
    done = subprocess.run([sys.executable, "-m", "bot.cli", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == (
        "inferbot: invalid configuration: INFERBOT_MAX_FILE_BYTES=12: expected a number at "
        "least 1024; INFERBOT_WORKERS=lots: expected a whole number (`inferbot doctor` checks "
        "it all)\n")
