"""`inferbot doctor`: is this deployment set up right, and if not, what exactly to change.

Each check is a small function returning `Finding`s, so the tests call them one by one and the
command prints them in order. A finding is one line that names the variable or file to change
and what it should hold. `fail` means the bot will not work as configured (exit 1); `warn`
means it works with something missing or could not be checked (Slack unreachable from here);
`ok` says what was verified.

The checks read the configuration the way `inferbot serve` does (the same Settings, the same
inventory and KB loaders) and change nothing: no migration, no known_hosts write, and an SQLite
file that does not exist yet is not created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from bot.config import CONFIG_VARIABLE, Settings, config_file, env_names, invalid_settings
from bot.structs import struct

Level = Literal["ok", "warn", "fail"]
SLACK_TIMEOUT_S = 5


@struct(frozen=True)
class Finding:
    """One line of the report: what was checked, and what to change when it is not ok."""

    level: Level
    area: str  # "config", "tokens", "slack", "database", "spool", "inventory", "kb"
    message: str
    setting: str | None = None  # the Settings field an invalid-variable finding is about

    def line(self) -> str:
        return f"{self.level.upper():4} {self.area}: {self.message}"


def _var(field: str) -> str:
    return env_names(field)[0]


# --------------------------------------------------------------------------- configuration

def load_settings() -> tuple[Settings, list[Finding]]:
    """Settings from the environment and the settings file, with one finding per invalid
    variable. The invalid ones fall back to their defaults so the remaining checks still run
    (one broken variable should not hide the next problem)."""
    sources = check_sources()
    try:
        return Settings(), [*sources, Finding("ok", "config",
                                              "every INFERBOT_* variable is valid")]
    except ValidationError as exc:
        findings = [*sources, *(Finding("fail", "config", line, setting=field)
                                for field, line in invalid_settings(exc))]
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        defaults: dict[str, Any] = {}
        for name, info in Settings.model_fields.items():
            if name in bad or bad & set(env_names(name)):
                # init values win over the environment; aliased fields take their alias
                key = env_names(name)[0] if info.validation_alias else name
                defaults[key] = info.get_default(call_default_factory=True)
        return Settings(**defaults), findings


def check_sources() -> list[Finding]:
    """The settings file named by INFERBOT_CONFIG exists, and no INFERBOT_* name, in the
    environment or the file, is a misspelling: Settings ignores unknown names, so a typo
    would silently leave the default in force."""
    import difflib
    import os

    from dotenv import dotenv_values

    out: list[Finding] = []
    path = config_file()
    names = set(os.environ)
    if path is not None:
        if not path.is_file():
            return [Finding("fail", "config", f"{CONFIG_VARIABLE}={path}: no such file")]
        names |= set(dotenv_values(path))
        out.append(Finding("ok", "config", f"settings file {path} (the environment wins)"))
    known = {name for field in Settings.model_fields for name in env_names(field)}
    for name in sorted(n for n in names if n.startswith("INFERBOT_") and n not in known
                       and n != CONFIG_VARIABLE):
        near = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {near[0]}?" if near else " (see the README's configuration " \
            "reference)"
        out.append(Finding("warn", "config", f"{name} is not an inferbot setting and is "
                           f"ignored{hint}"))
    return out


# --------------------------------------------------------------------------- tokens and Slack

def check_tokens(settings: Settings, *, http: bool) -> list[Finding]:
    """Formats only (no network): xoxb- bot token; xapp- app token for Socket Mode; the signing
    secret for HTTP mode."""
    out: list[Finding] = []
    bot = settings.bot_token.get_secret_value().strip() if settings.bot_token else ""
    if not bot:
        out.append(Finding("fail", "tokens", "no bot token: set SLACK_BOT_TOKEN (or "
                           "INFERBOT_BOT_TOKEN) to the Bot User OAuth Token, xoxb-..."))
    elif not bot.startswith("xoxb-"):
        kind = "an app-level token (xapp-)" if bot.startswith("xapp-") else \
            "a user token (xoxp-)" if bot.startswith("xoxp-") else "not a bot token"
        out.append(Finding("fail", "tokens", f"SLACK_BOT_TOKEN is {kind}: it must be the "
                           "Bot User OAuth Token, xoxb-... (OAuth & Permissions)"))
    else:
        out.append(Finding("ok", "tokens", "SLACK_BOT_TOKEN is a bot token (xoxb-)"))
    app = settings.app_token.get_secret_value().strip() if settings.app_token else ""
    if app and not app.startswith("xapp-"):
        out.append(Finding("fail", "tokens", "SLACK_APP_TOKEN must be an app-level token, "
                           "xapp-... (Basic Information -> App-Level Tokens, scope "
                           "connections:write)"))
    elif not http and not app:
        out.append(Finding("fail", "tokens", "Socket Mode needs SLACK_APP_TOKEN (xapp-..., "
                           "scope connections:write); or run `inferbot serve --http` with "
                           "SLACK_SIGNING_SECRET"))
    elif app:
        out.append(Finding("ok", "tokens", "SLACK_APP_TOKEN is an app-level token (xapp-)"))
    secret = settings.signing_secret.get_secret_value().strip() if settings.signing_secret \
        else ""
    if http and not secret:
        out.append(Finding("fail", "tokens", "HTTP mode needs SLACK_SIGNING_SECRET (Basic "
                           "Information -> Signing Secret)"))
    elif secret:
        out.append(Finding("ok", "tokens", "SLACK_SIGNING_SECRET is set"))
    return out


def check_slack(settings: Settings, timeout_s: float = SLACK_TIMEOUT_S) -> list[Finding]:
    """`auth.test` with the bot token through INFERBOT_SLACK_API_URL, when it is reachable
    within `timeout_s`: a refused token fails, an unreachable Slack only warns (doctor may run
    where the bot's egress is not)."""
    bot = settings.bot_token.get_secret_value().strip() if settings.bot_token else ""
    if not bot.startswith("xoxb-"):
        return []  # check_tokens said why
    from urllib.error import URLError

    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    from bot.evidence.redact import redact

    base = settings.slack_api_url or "https://slack.com/api/"
    client = WebClient(token=bot, base_url=base, timeout=int(max(1, timeout_s)))
    try:
        resp = client.auth_test()
    except SlackApiError as exc:
        return [Finding("fail", "slack", f"Slack refused SLACK_BOT_TOKEN: "
                        f"{exc.response.get('error')} (copy the Bot User OAuth Token again; "
                        "reinstall the app if it was revoked)")]
    except (URLError, OSError) as exc:
        reason = redact(str(getattr(exc, "reason", None) or exc)).splitlines()[:1]
        return [Finding("warn", "slack", f"could not reach {base} to check the token "
                        f"({reason[0] if reason else type(exc).__name__}); set "
                        "INFERBOT_SLACK_API_URL if the bot goes through a proxy")]
    return [Finding("ok", "slack", f"auth.test: bot {resp.get('user')} in team "
                    f"{resp.get('team')}")]


# --------------------------------------------------------------------------- database

def check_database(settings: Settings) -> list[Finding]:
    """Reachable, and migrated to this inferbot's schema revision."""
    from sqlalchemy.engine import make_url

    from bot.store.db import (
        HEAD,
        StoreUnavailable,
        connectivity,
        current_revision,
        make_engine,
        normalize_url,
        sqlite_path,
    )

    var = _var("database_url")
    try:
        url = make_url(normalize_url(settings.database_url))
    except Exception as exc:  # sqlalchemy's ArgumentError, or a ValueError from the URL
        return [Finding("fail", "database", f"{var} is not a database URL ({type(exc).__name__}"
                        "): expected sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB")]
    shown = url.render_as_string(hide_password=True)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return [Finding("warn", "database", f"{shown} does not exist yet: it is created on "
                        "first use, or now with `inferbot db upgrade`")]
    try:
        engine = make_engine(settings.database_url)
    except StoreUnavailable as exc:  # the driver itself did not load: already what to install
        return [Finding("fail", "database", f"{var}: {exc}")]
    try:
        with connectivity(), engine.connect() as conn:
            rev = current_revision(conn)
    except StoreUnavailable as exc:
        from bot.evidence.redact import redact

        return [Finding("fail", "database", f"cannot connect to {shown} ({redact(str(exc))}): "
                        f"check {var}, and that the server is up and reachable")]
    finally:
        engine.dispose()
    if rev == HEAD:
        return [Finding("ok", "database", f"{shown} reachable, schema at revision {rev}")]
    if rev is None or rev < HEAD:
        return [Finding("fail", "database", f"{shown} schema is at revision {rev or 'none'}, "
                        f"this inferbot needs {HEAD}: run `inferbot db upgrade`")]
    return [Finding("fail", "database", f"{shown} schema is at revision {rev}, newer than "
                    f"this inferbot ({HEAD}): upgrade inferbot")]


def check_spool(settings: Settings) -> list[Finding]:
    """The spool must be writable (it is where incidents go while the database is down), and
    entries waiting there mean the database was down and nothing has written them back yet."""
    import os

    from bot.store.spool import pending

    spool = settings.spool_dir
    where = f"{_var('spool_dir')}={spool}"
    existing = next((p for p in (spool, *spool.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK | os.X_OK):
        return [Finding("fail", "spool", f"{where} is not writable by this user: incidents "
                        "answered during a database outage would be lost")]
    waiting = pending(spool)
    if waiting:
        return [Finding("warn", "spool", f"{where}: {len(waiting)} incident(s) wait for the "
                        "database; the next command that reaches it (e.g. `inferbot db "
                        "upgrade`) writes them")]
    return [Finding("ok", "spool", f"{where}: writable, nothing waiting")]


# --------------------------------------------------------------------------- inventory

def check_inventory(settings: Settings) -> list[Finding]:
    """The inventory parses, and every host (and jump host) has a known_hosts entry: the
    collector refuses a host whose key is unknown, so a missing entry is a host that never
    answers `check`."""
    from bot.collect.inventory import InventoryError, default_path, load_inventory

    path = settings.inventory or default_path()
    var = _var("inventory")
    if not path.is_file():
        return [Finding("warn", "inventory", f"no inventory at {path}: `check HOST` is off "
                        f"until {var} names a hosts file")]
    where = f"{var}={path}"
    try:
        inventory = load_inventory(path)
    except InventoryError as exc:
        return [Finding("fail", "inventory", f"{where}: {exc}")]
    known = Path(inventory.data.known_hosts).expanduser()
    from bot.collect.ssh import _keyscan_hint

    keys = _host_keys(known)
    out: list[Finding] = []
    for name in inventory.hosts:
        try:
            target = inventory.resolve(name)
        except (InventoryError, ValueError) as exc:
            out.append(Finding("fail", "inventory", f"{where}: host {name}: {exc}"))
            continue
        for role, ep in (("", target.endpoint), ("jump host of ", target.jump)):
            if ep is not None and keys.lookup(ep.known_hosts_name) is None:
                out.append(Finding("fail", "inventory", f"{where}: {role}{name}: no key for "
                                   f"{ep.known_hosts_name} in {known}; verify the host's key, "
                                   f"then: {_keyscan_hint(ep, str(known))}"))
    if not out:
        out.append(Finding("ok", "inventory", f"{where}: {len(inventory.hosts)} host(s), each "
                           f"with a key in {known}"))
    return out


def _host_keys(path: Path) -> Any:
    import paramiko

    keys = paramiko.HostKeys()
    if path.is_file():
        keys.load(str(path))
    return keys


# --------------------------------------------------------------------------- knowledge base

def check_kb(settings: Settings) -> list[Finding]:
    """The shipped KB plus INFERBOT_KB_PATH folders load, and every example behaves."""
    from bot.authoring.examples import run_examples
    from bot.kb.errors import KBError
    from bot.kb.loader import load_kb

    site = f" (with {_var('kb_path')}={settings.kb_path})" if settings.kb_path else ""
    try:
        kb = load_kb(settings.kb_path or "", use_cache=False)
    except KBError as exc:
        return [Finding("fail", "kb", f"the knowledge base{site} is invalid: {exc} "
                        "(`inferbot kb validate` lists every error)")]
    failed = [r for r in run_examples(kb) if not r.ok]
    if failed:
        return [Finding("fail", "kb", f"{len(failed)} example(s) fail{site}, first: "
                        f"{failed[0].message()} (`inferbot kb test`)")]
    return [Finding("ok", "kb", f"KB {kb.version} ({kb.content_hash}){site}: "
                    f"{len(kb.problems)} problems, examples pass")]


# --------------------------------------------------------------------------- all of it

def run_all(*, http: bool, slack_timeout_s: float = SLACK_TIMEOUT_S) -> list[Finding]:
    """Every check, in the order an operator fixes things."""
    settings, findings = load_settings()
    invalid = {f.setting for f in findings if f.setting}
    # (area, the setting it reads, the check): a check whose setting is invalid is skipped,
    # since it would only report on the default that stands in for it.
    checks: list[tuple[str, str | None, Callable[[], list[Finding]]]] = [
        ("tokens", None, lambda: check_tokens(settings, http=http)),
        ("slack", "slack_api_url", lambda: check_slack(settings, slack_timeout_s)),
        ("database", "database_url", lambda: check_database(settings)),
        ("spool", "spool_dir", lambda: check_spool(settings)),
        ("inventory", "inventory", lambda: check_inventory(settings)),
        ("kb", "kb_path", lambda: check_kb(settings)),
    ]
    for area, setting, check in checks:
        if setting in invalid:
            continue
        try:
            findings += check()
        except ImportError as exc:  # a broken install: a dependency removed after the fact
            findings.append(Finding("fail", area, f"cannot check: {exc.name or exc} is not "
                                    "installed (pip install --force-reinstall inferbot)"))
    return findings


def failed(findings: Iterable[Finding]) -> bool:
    return any(f.level == "fail" for f in findings)
