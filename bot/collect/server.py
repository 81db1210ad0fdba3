"""Finding the inference server on a host and reading its flags.

GPU process ids belong to vLLM V1's worker processes, which rename themselves
(`VLLM::EngineCore`, `VLLM::Worker_TP0`) and so lose the server's flags from their command line;
the flags live on the ancestor `vllm serve` / `vllm.entrypoints.openai.api_server` process, in
`docker inspect` (Entrypoint + Cmd) or in the systemd unit's ExecStart. A process belongs to the
server when it is the server or one of its descendants, or runs in the server's container;
every other GPU process is foreign, and its memory is what the server could not have.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.schema import Engine

_CONTAINER = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_UNIT = re.compile(r"/([A-Za-z0-9@._-]{1,200}\.service)(?:/|$)")
_SERVERS: tuple[tuple[Engine, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r"(?:^|[\s/])vllm serve(?:\s|$)|vllm\.entrypoints\.openai\.api_server")),
    ("sglang", re.compile(r"sglang\.launch_server")),
    ("tgi", re.compile(r"(?:^|[\s/])text-generation-launcher(?:\s|$)")),
    ("lmdeploy", re.compile(r"(?:^|[\s/])lmdeploy serve(?:\s|$)")),
)


class Proc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pid: int
    ppid: int
    cgroup: str
    args: str

    @property
    def container(self) -> str | None:
        m = _CONTAINER.search(self.cgroup)
        return m.group(1) if m else None

    @property
    def unit(self) -> str | None:
        m = _UNIT.search(self.cgroup)
        return m.group(1) if m else None


class Server(BaseModel):
    """The server under diagnosis; `argv` as exact as the best source gave it."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine
    pid: int | None = None
    argv: list[str] = Field(default_factory=list)
    argv_source: str = ""
    container: str | None = None  # 64-hex id
    unit: str | None = None
    image: str | None = None
    hf_hub_dir: str | None = None  # host side of the container's HF cache mount
    mounts: list[tuple[str, str]] = Field(default_factory=list)  # (container path, host path)


def split_argv(line: str) -> list[str]:
    """A shell-quoted command line back into arguments (plain split if the quoting is off)."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def redacted_argv(argv: list[str]) -> list[str]:
    """argv from JSON (docker inspect) with its secrets hidden: joined into a shell line, where
    `--api-key X` is a form the redactor knows, redacted, then split back."""
    from bot.collect.execute import redact_text

    return split_argv(redact_text(shlex.join(argv)))


def parse_ps(text: str) -> dict[int, Proc]:
    procs = {}
    for line in text.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
            procs[int(parts[0])] = Proc(pid=int(parts[0]), ppid=int(parts[1]),
                                        cgroup=parts[2], args=parts[3])
    return procs


def engine_of(args: str) -> Engine | None:
    return next((engine for engine, rx in _SERVERS if rx.search(args)), None)


def find_server(procs: dict[int, Proc], gpu_pids: list[int]) -> Server | None:
    """The server whose workers hold the GPU, else any server process (still starting, or
    restarting). With several, the first GPU holder's; the inventory's container, read with
    docker inspect afterwards, overrides the choice."""
    def root(pid: int) -> Proc | None:
        seen = set()
        while pid in procs and pid not in seen:
            seen.add(pid)
            if engine_of(procs[pid].args):
                return procs[pid]
            pid = procs[pid].ppid
        return None

    holders = [p for p in (root(pid) for pid in gpu_pids) if p is not None]
    for p in [*holders, *procs.values()]:
        engine = engine_of(p.args)
        if engine is not None:
            return Server(engine=engine, pid=p.pid, argv=p.args.split(), argv_source="ps",
                          container=p.container, unit=p.unit)
    return None


def belongs(server: Server | None, procs: dict[int, Proc], pid: int | None) -> bool:
    """Is `pid` the server, a descendant of it, or in the server's container?"""
    if server is None or pid is None:
        return False
    p = procs.get(pid)
    if p is not None and server.container and p.container == server.container:
        return True
    seen = set()
    while p is not None and p.pid not in seen:
        if p.pid == server.pid:
            return True
        seen.add(p.pid)
        p = procs.get(p.ppid)
    return False


def apply_docker_inspect(server: Server | None, text: str) -> Server | None:
    """Flags (Entrypoint + Cmd), id, image and HF cache mount from `docker inspect` JSON."""
    try:
        data = json.loads(text)
        info: dict[str, Any] = data[0]
    except (ValueError, IndexError, KeyError, TypeError):
        return server
    config = info.get("Config") or {}
    argv = redacted_argv([*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])])
    engine = engine_of(" ".join(argv)) or (server.engine if server else None)
    if engine is None:
        return server
    mounts = [(m.get("Destination", ""), m.get("Source", "")) for m in info.get("Mounts") or []]
    env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    hf_home = env.get("HF_HOME", "/root/.cache/huggingface")
    hub = env.get("HF_HUB_CACHE", f"{hf_home}/hub")
    cid = info.get("Id")
    pid = (info.get("State") or {}).get("Pid") or None  # host PID; 0 when stopped
    # the process found by ps is this container's server only if it runs in this container
    same = server is not None and cid is not None and server.container == cid
    base = server if same and server is not None else Server(engine=engine, pid=pid)
    return base.model_copy(update={
        "engine": engine, "argv": argv, "argv_source": "docker inspect", "container": cid,
        "image": config.get("Image"), "mounts": mounts, "hf_hub_dir": host_path(mounts, hub)})


def host_path(mounts: list[tuple[str, str]], path: str) -> str | None:
    """Map a path inside the container to the host through its bind mounts."""
    for dest, src in sorted(mounts, key=lambda m: -len(m[0])):
        if dest and (path == dest or path.startswith(dest.rstrip("/") + "/")):
            return src.rstrip("/") + path[len(dest.rstrip("/")):]
    return None


def apply_systemd(server: Server | None, text: str, unit: str) -> Server | None:
    """`systemctl show -p ExecStart`: `ExecStart={ path=... ; argv[]=vllm serve ... ; ...}`."""
    m = re.search(r"argv\[\]=([^;\n]{1,10000})", text)
    if m is None:
        return server
    argv = m.group(1).split()
    engine = engine_of(" ".join(argv)) or (server.engine if server else None)
    if engine is None:
        return server
    base = server or Server(engine=engine)
    return base.model_copy(update={"engine": engine, "argv": argv,
                                   "argv_source": "systemctl show", "unit": unit})


# -- flags -> facts ----------------------------------------------------------------------------

def flags_to_facts(server: Server) -> dict[str, Any]:
    """The Facts fields the server's argv sets, through the evidence layer's one settings table
    (bot.evidence.flags), so a flag means the same collected or pasted."""
    from bot.evidence.base import FactSink
    from bot.evidence.flags import SETTINGS, apply_setting
    from bot.evidence.units import KINDS

    sink = FactSink()
    sink.set("engine", server.engine)
    argv = server.argv
    if "serve" in argv:  # `vllm serve MODEL`: the model is positional
        i = argv.index("serve")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            apply_setting("model", argv[i + 1], sink, 0)
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        name, eq, inline = arg.partition("=")
        fact = SETTINGS.get(name.lstrip("-").replace("_", "-").lower().removeprefix("no-"))
        if not arg.startswith("-") or fact is None:
            continue
        if KINDS[fact] == "bool":
            apply_setting(name, inline if eq else None, sink, 0)
        elif eq:
            apply_setting(name, inline, sink, 0)
        elif i < len(argv):
            apply_setting(name, argv[i], sink, 0)
            i += 1
    if server.image and (m := re.search(r":v?(\d+\.\d+[\w.+-]{0,20})$", server.image)):
        sink.set_default("engine_version", m.group(1))
    return sink.build().known()
