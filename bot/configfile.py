"""Where settings come from, without reading them all: the optional settings file and single
raw variables.

Standard library only, because the KB loader and the collector ask for one path each on the
start-up path of `inferbot diagnose`, which must not pay for pydantic-settings (bot.config).
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_VARIABLE = "INFERBOT_CONFIG"


def config_file() -> Path | None:
    """The optional settings file: `INFERBOT_CONFIG`, else `$XDG_CONFIG_HOME/inferbot/
    inferbot.env` when it exists. It holds the same `NAME=value` lines as the environment (a
    systemd EnvironmentFile or a compose env_file can be the same file); a variable set in the
    environment wins over the file."""
    named = os.environ.get(CONFIG_VARIABLE, "").strip()
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    path = Path(base) / "inferbot" / "inferbot.env"
    return path if path.is_file() else None


def raw_setting(name: str) -> str | None:
    """One variable as Settings reads it (the environment, then the settings file; empty is
    unset) without validating the others: the KB loader and the collector need one path each
    and must not fail, or slow `inferbot diagnose` down, over an unrelated bad setting."""
    value = os.environ.get(name, "").strip()
    if not value:
        path = config_file()
        if path is not None and path.is_file():
            from dotenv import dotenv_values

            value = (dotenv_values(path).get(name) or "").strip()
    return value or None
