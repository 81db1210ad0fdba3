"""Settings: no set-up needed, everything overridable from INFERBOT_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, get_settings


def test_defaults_live_in_the_user_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    for var in ("INFERBOT_DATABASE_URL", "INFERBOT_SPOOL_DIR", "INFERBOT_KB_PATH"):
        monkeypatch.delenv(var, raising=False)
    s = Settings()
    assert s.database_url == f"sqlite:///{tmp_path / 'inferbot' / 'inferbot.db'}"
    assert s.spool_dir == tmp_path / "inferbot" / "spool"
    assert s.kb_path is None


def test_without_xdg_the_home_share_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("INFERBOT_DATABASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".local" / "share" / "inferbot" / "inferbot.db"
    assert Settings().database_url == f"sqlite:///{expected}"


def test_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBOT_DATABASE_URL", "postgresql://u@db/inferbot")
    monkeypatch.setenv("INFERBOT_SPOOL_DIR", str(tmp_path / "sp"))
    monkeypatch.setenv("INFERBOT_KB_PATH", "/etc/inferbot/kb")
    s = Settings()
    assert s.database_url == "postgresql://u@db/inferbot"
    assert s.spool_dir == tmp_path / "sp"
    assert s.kb_path == "/etc/inferbot/kb"


def test_get_settings_is_read_once() -> None:
    get_settings.cache_clear()
    try:
        assert get_settings() is get_settings()
    finally:
        get_settings.cache_clear()
