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
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.configfile import CONFIG_VARIABLE, config_file, raw_setting

__all__ = ["CONFIG_VARIABLE", "Settings", "config_file", "get_settings", "raw_setting"]


def data_dir() -> Path:
    """The per-user data directory (XDG), where the default database and spool live.

    `$XDG_DATA_HOME/inferbot`, else `~/.local/share/inferbot`: the same place on every run, so
    history survives upgrades and working directories.
    """
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if base.strip() else Path.home() / ".local" / "share"
    return root / "inferbot"


# The database URL schemes inferbot works with (bot.store.db maps the PostgreSQL spellings to
# psycopg 3). Anything else is refused by name, before a driver is looked for: `mysql://` is
# "not supported", never "no module named MySQLdb".
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg",
                    "postgresql+psycopg2")
DATABASE_URL_FORMS = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB"


def _default_database_url() -> str:
    return f"sqlite:///{data_dir() / 'inferbot.db'}"


def _default_spool_dir() -> Path:
    return data_dir() / "spool"


class Settings(BaseSettings):
    """All configuration. Environment: `INFERBOT_<FIELD>` (e.g. `INFERBOT_DATABASE_URL`), then
    the settings file (`config_file()`), then the defaults."""

    # An empty variable means unset: compose files and .env templates pass `VAR=` through.
    model_config = SettingsConfigDict(env_prefix="INFERBOT_", extra="ignore",
                                      env_ignore_empty=True)

    # SQLite by default (no set-up); `postgresql://...` or `postgresql+psycopg://...` in production.
    database_url: str = Field(default_factory=_default_database_url)
    # How long one store call may take (recording an incident, the reply-once key, history,
    # resolve, feedback, the health probe); past it the incident is spooled and the answer
    # goes on, and a lookup fails with "the store is unavailable".
    db_deadline_s: float = Field(default=4.0, gt=0, le=60)
    # Events that could not be written (database down) wait here as JSON files until the next
    # successful connection writes them.
    spool_dir: Path = Field(default_factory=_default_spool_dir)
    # A site's own knowledge-base folder, layered over the bundled one.
    kb_path: str | None = None
    # The hosts inferbot may collect from (YAML; bot.collect.inventory reads it via raw_setting);
    # unset: ~/.config/inferbot/hosts.yaml.
    inventory: Path | None = None
    # `inferbot check --local` (or `localhost`) may read the machine it runs on. Off unless
    # the operator says so; chat can never ask for the bot's own machine.
    allow_localhost: bool = False

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
    # Threads doing the work behind the 3-second ack (diagnosis, collection, uploads), and how
    # many messages may wait for one; past that a message is told to retry in a minute.
    workers: int = Field(default=4, ge=1, le=64)
    work_queue: int = Field(default=1000, ge=1)
    # New messages in one channel at most this often (Slack allows about one a second); a
    # channel's mentions are answered one after another, in the order they came.
    slack_channel_interval_s: float = Field(default=1.0, ge=0, le=10)
    # App Home is rendered at most once in this many seconds per user.
    home_debounce_s: float = Field(default=5.0, ge=0)
    # The HTTP endpoint (`serve --http`, bot.slack.http): the largest request body (Slack's
    # events are small: large pastes arrive as files), how long a connection may send nothing,
    # how long one request may take to arrive, the threads answering complete requests, and
    # the open connections.
    http_max_body_bytes: int = Field(default=1_000_000, ge=1024)
    http_idle_timeout_s: int = Field(default=10, ge=2)
    http_request_timeout_s: int = Field(default=10, ge=1)
    http_threads: int = Field(default=16, ge=1, le=256)
    http_max_connections: int = Field(default=1000, ge=10)

    # --- Logs (`inferbot serve`): one line per record, redacted; json for log shippers.
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    def __init__(self, **values: Any) -> None:
        # The file is looked up on every construction, not at import, so a process (or a test)
        # that changes INFERBOT_CONFIG gets the file it names.
        values.setdefault("_env_file", config_file())
        super().__init__(**values)

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _case_blind(cls, value: object, info: ValidationInfo) -> object:
        """`json`, `JSON`, `info`: operators type these every way; the meaning is the same."""
        if not isinstance(value, str):
            return value
        value = value.strip()
        return value.lower() if info.field_name == "log_format" else value.upper()

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        scheme, sep, rest = value.strip().partition("://")
        if not sep or not scheme:
            raise ValueError(f"not a database URL: expected {DATABASE_URL_FORMS}")
        if scheme.lower() not in DATABASE_SCHEMES:
            import difflib

            near = difflib.get_close_matches(scheme.lower(), DATABASE_SCHEMES, n=1)
            hint = f" (did you mean {near[0]}://?)" if near else ""
            raise ValueError(f"unsupported scheme {scheme}://{hint}: supported are sqlite:// "
                             f"and postgresql:// (also postgres://), e.g. {DATABASE_URL_FORMS}")
        if scheme.lower() == "sqlite" and not rest.startswith("/"):
            raise ValueError("an SQLite URL has three slashes and a path: sqlite:///PATH")
        return value.strip()

    @field_validator("slack_api_url")
    @classmethod
    def _web_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, sep, rest = value.strip().partition("://")
        if scheme.lower() not in ("http", "https") or not sep or not rest.split("/")[0]:
            raise ValueError("expected an http:// or https:// URL of the Slack Web API, "
                             "e.g. https://slack.com/api/")
        return value.strip()

    @field_validator("allowed_users", "allowed_usergroups", "allowed_channels", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


def env_names(field: str) -> list[str]:
    """The environment variables that set `field`, preferred first (what an error must name)."""
    info = Settings.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [f"INFERBOT_{field.upper()}"]


def describe_errors(exc: ValidationError) -> list[str]:
    """One line per invalid setting, naming its variable and what is expected, e.g.
    `INFERBOT_WORKERS=abc: expected a whole number`. pydantic's own text names
    the Python field and spans lines; an operator edits environment variables, not fields."""
    return [line for _field, line in invalid_settings(exc)]


def invalid_settings(exc: ValidationError) -> list[tuple[str, str]]:
    """(field, line) for each invalid setting: the line as `describe_errors` gives it, and the
    Settings field it is about, for callers that skip what depends on that field."""
    lines = []
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        if field not in Settings.model_fields:  # an alias: map it back to its field
            field = next((name for name in Settings.model_fields if field in env_names(name)),
                         field)
        names = env_names(field) if field in Settings.model_fields else [field.upper()]
        # The variable that is set, as the operator typed it (validators may have normalised
        # the input already); secrets are named, never shown.
        name = next((n for n in names if n in os.environ), names[0])
        value = os.environ.get(name, err.get("input"))
        shown = f"={value}" if isinstance(value, str | int | float) and not isinstance(
            value, bool) and "token" not in field and "secret" not in field else ""
        if "://" in shown:  # a URL may carry a password
            from bot.evidence.redact import redact

            shown = redact(shown)
        lines.append((field, f"{name}{shown}: {_expected(err)}"))
    return lines


def _expected(err: ErrorDetails) -> str:
    """What the variable should hold, in an operator's words."""
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "expected a whole number"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = next(iter(ctx.values()), "?")
        word = {"greater_than_equal": "at least", "less_than_equal": "at most",
                "greater_than": "more than", "less_than": "less than"}[kind]
        return f"expected a number {word} {bound}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected', '')}"
    if kind == "value_error" and "error" in ctx:  # a validator's own words
        return str(ctx["error"])
    return f"{err['msg'][0].lower()}{err['msg'][1:]}" if err["msg"] else "invalid"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once. Tests build `Settings(...)` directly instead."""
    return Settings()
