"""The one Settings object: every knob of inferbot, read from `INFERBOT_*` environment variables.

Kept to pydantic-settings and the standard library because `inferbot diagnose` imports it on
its start-up path; nothing here may pull in SQLAlchemy, Slack or paramiko. Defaults need no
set-up at all: the incident store is an SQLite file in the user's data directory, created on
first use.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def data_dir() -> Path:
    """The per-user data directory (XDG), where the default database and spool live.

    `$XDG_DATA_HOME/inferbot`, else `~/.local/share/inferbot`: the same place on every run, so
    history survives upgrades and working directories.
    """
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if base.strip() else Path.home() / ".local" / "share"
    return root / "inferbot"


def _default_database_url() -> str:
    return f"sqlite:///{data_dir() / 'inferbot.db'}"


def _default_spool_dir() -> Path:
    return data_dir() / "spool"


class Settings(BaseSettings):
    """All configuration. Environment: `INFERBOT_<FIELD>` (e.g. `INFERBOT_DATABASE_URL`)."""

    model_config = SettingsConfigDict(env_prefix="INFERBOT_", extra="ignore")

    # SQLite by default (no set-up); `postgresql://...` or `postgresql+psycopg://...` in production.
    database_url: str = Field(default_factory=_default_database_url)
    # Events that could not be written (database down) wait here as JSON files until the next
    # successful connection writes them.
    spool_dir: Path = Field(default_factory=_default_spool_dir)
    # A site's own knowledge-base folder, layered over the bundled one.
    kb_path: str | None = None

    # --- Slack (`inferbot serve`). Tokens also read Slack's own variable names. ---
    bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("INFERBOT_BOT_TOKEN", "SLACK_BOT_TOKEN"))
    # App-level token (xapp-, scope connections:write): Socket Mode.
    app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("INFERBOT_APP_TOKEN", "SLACK_APP_TOKEN"))
    # HTTP mode: every request's X-Slack-Signature is checked with it.
    signing_secret: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("INFERBOT_SIGNING_SECRET", "SLACK_SIGNING_SECRET"))
    # The Web API base URL (a proxy, or a local fake in tests); None = https://slack.com/api/.
    slack_api_url: str | None = None
    # Who may trigger collection from hosts: comma-separated Slack ids. Users (U.../W...) and
    # user groups (S...) say who; channels (C.../G...), when set, say where. Nothing set: nobody.
    allowed_users: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_usergroups: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_channels: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Bounds on what one message brings in: the pasted text, each downloaded snippet file.
    max_paste_bytes: int = Field(default=256 * 1024, ge=1024)
    max_file_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # Threads doing the work behind the 3-second ack (diagnosis, collection, uploads).
    workers: int = Field(default=4, ge=1, le=64)

    @field_validator("allowed_users", "allowed_usergroups", "allowed_channels", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once. Tests build `Settings(...)` directly instead."""
    return Settings()
