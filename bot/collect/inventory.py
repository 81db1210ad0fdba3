"""The inventory: the only hosts inferbot will ever connect to, and how to reach each one.

A chat message can only *name* a host. The name is checked against a strict pattern and then
looked up exactly in this file; nothing else from chat reaches the SSH layer. Connection details
come from the inventory entry first, then from ~/.ssh/config (HostName, User, Port,
IdentityFile, ProxyJump), then from defaults, so a fleet already described in ssh_config needs
only names here.

File (YAML; INFERBOT_INVENTORY or ~/.config/inferbot/hosts.yaml):

    known_hosts: ~/.ssh/known_hosts     # where host keys are verified (never written)
    hosts:
      - name: gpu-07
        address: 10.0.0.7               # default: ssh_config HostName, else the name
        user: ubuntu
        key: ~/.ssh/inferbot_ed25519
        jump: bastion                   # an inventory name, or [user@]host[:port]
        logs: {source: docker, container: vllm}
        tags: [h100, prod]
        channels: [C0123456]
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from bot.configfile import raw_setting
from bot.kb.yamlio import KBError, load

# One label-ish token: letters, digits, dot, dash, underscore; it cannot start with a dot or a
# dash, so `../x`, `-oProxyCommand=...`, `gpu1;id` and `$(id)` are all refused by shape alone.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_NAME = re.compile(NAME_PATTERN)
LOCAL_NAME = "localhost"  # `inferbot check localhost` reads this machine, never over SSH
DEFAULT_PORT = 22

HostName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
# Values that end up as quoted arguments of catalog commands: bounded, printable, no NUL.
Token = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9@._:/+-]{1,200}$")]


# The smallest useful inventory, shown where there is none (host keys come from
# ~/.ssh/known_hosts unless `known_hosts:` says otherwise). A test loads it as an inventory.
EXAMPLE = """hosts:
  - {name: gpu-07, address: 10.0.0.7, user: inferbot, key: ~/.ssh/id_ed25519}"""


class InventoryError(Exception):
    """The inventory cannot be used (missing, invalid). `str()` names the file and line."""


class InventoryMissing(InventoryError):
    """There is no inventory file at all: the first thing a new user meets."""


class HostRefused(Exception):
    """A host name that is not a valid name or not in the inventory. Nothing was contacted."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LogSource(_Model):
    """Where the vLLM server's logs are. `auto` finds the server process and follows it."""

    source: Literal["auto", "docker", "systemd", "file"] = "auto"
    container: Token | None = None
    unit: Token | None = None
    path: Token | None = None

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or "/../" in f"{v}/"):
            raise ValueError("must be an absolute path without '..'")
        return v

    @model_validator(mode="after")
    def _complete(self) -> LogSource:
        need = {"docker": "container", "systemd": "unit", "file": "path"}.get(self.source)
        if need and getattr(self, need) is None:
            raise ValueError(f"logs.source {self.source!r} needs logs.{need}")
        return self


class HostEntry(_Model):
    name: HostName
    address: Token | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    user: Token | None = None
    key: str | None = None
    jump: Token | None = None
    look_for_keys: bool = False
    allow_agent: bool = True
    logs: LogSource = Field(default_factory=LogSource)
    tags: list[str] = Field(default_factory=list)
    channels: list[str] = Field(default_factory=list)


class InventoryFile(_Model):
    known_hosts: str = "~/.ssh/known_hosts"
    ssh_config: str = "~/.ssh/config"
    hosts: list[HostEntry] = Field(default_factory=list)


class Endpoint(_Model):
    """Everything needed to open one SSH connection, fully resolved."""

    address: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    look_for_keys: bool = False
    allow_agent: bool = True
    timeout_s: float | None = None  # ssh_config ConnectTimeout, when set

    @property
    def known_hosts_name(self) -> str:
        """The key known_hosts uses for this endpoint (what ssh-keyscan writes)."""
        return self.address if self.port == DEFAULT_PORT else f"[{self.address}]:{self.port}"


class Target(_Model):
    """A host from the inventory, resolved: where to connect, through what, and its logs."""

    name: str
    endpoint: Endpoint
    jump: Endpoint | None = None
    known_hosts: str
    logs: LogSource
    tags: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()


def default_path() -> Path:
    named = raw_setting("INFERBOT_INVENTORY")
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(base) / "inferbot" / "hosts.yaml"


def valid_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def check_name(name: str) -> str:
    """Refuse a name that cannot be an inventory name, before any lookup or connection."""
    if not valid_name(name):
        shown = name.encode("unicode_escape").decode("ascii")[:80]
        raise HostRefused(f"refused {shown!r}: not a valid host name (letters, digits, . _ -)")
    return name


class Inventory:
    """The loaded inventory. `resolve(name)` is the only way to get something to connect to."""

    def __init__(self, data: InventoryFile, path: Path | None = None) -> None:
        self.path = path
        self.data = data
        self.hosts: dict[str, HostEntry] = {}
        for h in data.hosts:
            if h.name in self.hosts:
                raise InventoryError(f"{path or 'inventory'}: host {h.name!r} is listed twice")
            self.hosts[h.name] = h
        self._ssh_config = _read_ssh_config(Path(data.ssh_config).expanduser())

    def resolve(self, name: str) -> Target:
        check_name(name)
        entry = self.hosts.get(name)
        if entry is None:
            where = self.path or "the inventory"
            raise HostRefused(f"refused {name!r}: not in {where} (add it there to allow checks)")
        endpoint, cfg_jump = self._endpoint(entry.name, entry)
        jump_spec = entry.jump or cfg_jump
        jump = self._jump(jump_spec) if jump_spec and jump_spec != "none" else None
        return Target(name=entry.name, endpoint=endpoint, jump=jump,
                      known_hosts=str(Path(self.data.known_hosts).expanduser()),
                      logs=entry.logs, tags=tuple(entry.tags), channels=tuple(entry.channels))

    def _endpoint(self, alias: str, entry: HostEntry | None) -> tuple[Endpoint, str | None]:
        cfg = self._lookup(alias)
        keys = [entry.key] if entry and entry.key else list(cfg.get("identityfile", []))
        timeout = cfg.get("connecttimeout")
        ep = Endpoint(
            address=(entry.address if entry else None) or cfg.get("hostname") or alias,
            port=(entry.port if entry else None) or int(cfg.get("port", DEFAULT_PORT)),
            user=(entry.user if entry else None) or cfg.get("user") or getpass.getuser(),
            key_files=tuple(str(Path(k).expanduser()) for k in keys),
            look_for_keys=entry.look_for_keys if entry else False,
            allow_agent=entry.allow_agent if entry else True,
            timeout_s=float(timeout) if timeout else None,
        )
        return ep, cfg.get("proxyjump")

    def _jump(self, spec: str) -> Endpoint:
        """One hop: an inventory name, an ssh_config alias, or [user@]host[:port]."""
        if "," in spec:
            raise InventoryError(f"jump {spec!r}: only one jump host is supported")
        if spec in self.hosts:
            return self._endpoint(spec, self.hosts[spec])[0]
        m = re.fullmatch(r"(?:([^@]{1,64})@)?([^@:]{1,200})(?::(\d{1,5}))?", spec)
        if m is None:
            raise InventoryError(f"jump {spec!r}: expected [user@]host[:port]")
        user, host, port = m.groups()
        ep = self._endpoint(host, None)[0]
        return ep.model_copy(update={"user": user or ep.user,
                                     "port": int(port) if port else ep.port})

    def _lookup(self, alias: str) -> dict[str, Any]:
        return {} if self._ssh_config is None else dict(self._ssh_config.lookup(alias))


class _SSHConfig(Protocol):
    """The part of paramiko.SSHConfig used here (values are strings; identityfile a list)."""

    def lookup(self, hostname: str) -> dict[str, Any]: ...


def _read_ssh_config(path: Path) -> _SSHConfig | None:
    if not path.is_file():
        return None
    import paramiko

    try:
        return cast(_SSHConfig, paramiko.SSHConfig.from_path(str(path)))
    except (OSError, paramiko.ConfigParseError) as exc:
        raise InventoryError(f"{path}: cannot read ssh config: {exc}") from None


def load_inventory(path: Path | None = None) -> Inventory:
    """Read and validate the inventory; errors name the file and the line."""
    p = path or default_path()
    if not p.is_file():
        raise InventoryMissing(f"no inventory at {p}: create it (the README's \"Inventory "
                               "and known_hosts\" has every field) or set INFERBOT_INVENTORY")
    try:
        data = load(p).validate(InventoryFile)
    except KBError as exc:
        raise InventoryError(str(exc)) from None
    except OSError as exc:
        raise InventoryError(f"cannot read {p}: {exc.strerror or exc}") from None
    return Inventory(data, p)
