"""Collecting from hosts: the order of the catalog commands, hosts in parallel, deadlines, audit.

One flow serves both SSH hosts and this machine: GPU state (nvidia-smi, or NVML locally), the
process table, the server's exact flags, its logs, its model's config.json and versions. Each
step that fails leaves a one-line note and the next step still runs, so a host that answers
half the questions still gets a diagnosis from that half.

Hosts run in a thread pool, each under its own deadline that every blocking call respects; a
host that is dead or slow costs only its deadline. Names are checked and looked up before any
connection is made; a refused name never reaches the SSH layer.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from typing import Any

from bot.collect import catalog
from bot.collect.catalog import Command, UnsafeValue
from bot.collect.execute import GRACE_S, CommandResult, Executor, LocalExecutor
from bot.collect.gpu import GpuReading, from_nvidia_smi
from bot.collect.inventory import (
    LOCAL_NAME,
    HostRefused,
    Inventory,
    InventoryError,
    LogSource,
    Target,
    check_name,
)
from bot.collect.nvml import NvmlUnavailable, load_pynvml, read_nvml
from bot.collect.server import (
    Server,
    apply_docker_inspect,
    apply_systemd,
    find_server,
    flags_to_facts,
    host_path,
    parse_ps,
    split_argv,
)
from bot.collect.snapshot import Snapshot, why
from bot.errors import one_line
from bot.schema import CommandRun

DEFAULT_DEADLINE_S = 30.0
MAX_PARALLEL = 32
MIN_LEFT_S = 0.2  # less time than this left: do not start another batch


Step = tuple[Any, ...]  # (catalog builder, *its arguments)


class _Steps:
    """Runs catalog commands for one snapshot in batches, within its deadline, recording each
    result; a value that fails its pattern or a deadline already spent is a note, not a run."""

    def __init__(self, snap: Snapshot, executor: Executor, deadline: float) -> None:
        self.snap, self.executor, self.deadline = snap, executor, deadline

    def spent(self, what: str) -> bool:
        """The deadline is (nearly) reached: say what is left unread instead of guessing."""
        if self.deadline - time.monotonic() >= MIN_LEFT_S:
            return False
        self.snap.unread.append(f"{what}: not read, the host's deadline was reached")
        return True

    def batch(self, steps: Sequence[Step]) -> list[CommandResult | None]:
        cmds: list[Command | None] = []
        for build, *args in steps:
            try:
                cmds.append(build(*args))
            except UnsafeValue as exc:
                self.snap.unread.append(str(exc))
                cmds.append(None)
        todo = [c for c in cmds if c is not None]
        if todo and self.deadline - time.monotonic() < MIN_LEFT_S:
            self.snap.unread.extend(f"{c.id}: not run, the host's deadline was reached"
                                    for c in todo)
            todo = []
        done = iter(self.executor.run(todo, self.deadline) if todo else [])
        results = [next(done) if c is not None and todo else None for c in cmds]
        self.snap.commands.extend(r for r in results if r is not None)
        return results


def collect(snap: Snapshot, executor: Executor, deadline: float, logs: LogSource,
            gpu: GpuReading | None = None) -> Snapshot:
    """Fill `snap` from one host in three batches, each needing the one before: GPU state and
    processes; then the server's flags and logs; then its model's config.json. `gpu` is given
    when NVML already read the GPUs."""
    steps = _Steps(snap, executor, deadline)
    gpu_steps: list[Step] = [] if gpu is not None else [
        (catalog.gpu_query,), (catalog.gpu_apps,), (catalog.gpu_table,)]
    *smi, ps, module = steps.batch([*gpu_steps, (catalog.processes,), (catalog.driver_module,)])
    snap.gpu = gpu if gpu is not None else _nvidia_smi(snap, *smi)
    procs = parse_ps(ps.output) if ps is not None and ps.ok else {}
    if ps is not None and not ps.ok:
        snap.unread.append(f"the process table: {why(ps)}")
    if module is not None and module.ok and snap.gpu.driver_version is None:
        # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.48.01  ..."
        m = re.search(r"Kernel Module\s{1,8}([0-9][0-9.]{1,20})", module.output)
        snap.gpu.driver_version = m.group(1) if m else None
    if steps.spent("the server's flags, logs and model config"):
        return snap
    gpu_pids = [p.pid for p in (snap.gpu.processes or []) if p.pid is not None]
    server = find_server(procs, gpu_pids)
    snap.server = _flags_and_logs(steps, server, logs)
    snap.classify(procs)
    if not steps.spent("the model's config.json"):
        _model_config(steps, snap.server)
    return snap


def _nvidia_smi(snap: Snapshot, q: CommandResult | None, a: CommandResult | None,
                t: CommandResult | None) -> GpuReading:
    def usable(r: CommandResult | None) -> str | None:
        # rc 14 (infoROM corrupted) comes with valid output and a WARNING line
        return r.output if r is not None and r.error is None and r.rc in (0, 14) else None

    reading = from_nvidia_smi(usable(q), usable(a), usable(t))
    if t is not None:
        snap.table = t.output  # shown verbatim; a failure's text is evidence too
    for what, r in (("GPU memory", q), ("GPU processes", a)):
        if r is not None and usable(r) is None:
            snap.unread.append(f"{what}: {why(r)}")
    return reading


def _flags_and_logs(steps: _Steps, server: Server | None, logs: LogSource) -> Server | None:
    """The exact argv (/proc/PID/cmdline, docker inspect, the systemd unit) and the logs."""
    container = logs.container or (server.container if server else None)
    unit = logs.unit or (server.unit if server else None)
    flag_steps: list[Step] = []
    if server is not None and server.pid is not None:
        flag_steps.append((catalog.cmdline, server.pid))
    if container:
        flag_steps.append((catalog.docker_inspect, container))
    elif unit:
        flag_steps.append((catalog.systemd_show, unit))
    exe = next((a for a in (server.argv[:2] if server else []) if a.startswith("/")), None)
    if exe:
        flag_steps.append((catalog.engine_version, exe))
    log_step = _log_step(server, logs, container, unit)
    results = steps.batch([*flag_steps, *([log_step] if log_step else [])])
    failed = []
    for (build, *_args), r in zip(flag_steps, results, strict=False):
        if r is None:
            continue
        if not r.ok:
            failed.append(f"the server's flags ({r.id}): {why(r)}")
        elif build is catalog.engine_version:
            m = re.search(r"/(?:vllm|sglang)-([0-9][\w.+]{0,30})\.dist-info", r.output)
            steps.snap.engine_version = m.group(1) if m else None
        elif build is catalog.cmdline and server is not None and r.output.strip():
            server.argv, server.argv_source = split_argv(r.output), f"/proc/{server.pid}/cmdline"
        elif build is catalog.docker_inspect:
            server = apply_docker_inspect(server, r.output)
        elif build is catalog.systemd_show and unit:
            server = apply_systemd(server, r.output, unit)
    if log_step is None:
        steps.snap.unread.append("the server's logs: no server found and no log source in the "
                                 "inventory")
    elif (r := results[-1]) is not None:
        steps.snap.logs, steps.snap.logs_source = r.output, r.command
        if not r.ok:
            steps.snap.unread.append(f"the server's logs: {why(r)}")
    if server is None:
        steps.snap.unread.append("the server's flags: no vLLM / SGLang / TGI server process found")
    elif server.argv_source == "ps":  # no exact source worked: say why
        steps.snap.unread.extend(failed)
    return server


def _log_step(server: Server | None, logs: LogSource, container: str | None,
              unit: str | None) -> Step | None:
    if logs.source == "file" and logs.path:
        return (catalog.logs_file, logs.path)
    if container and logs.source in ("auto", "docker"):
        return (catalog.logs_docker, container)
    if unit and logs.source in ("auto", "systemd"):
        return (catalog.logs_journal, unit)
    if server is not None and server.pid is not None:
        return (catalog.logs_of_pid, server.pid)
    return None


def _model_config(steps: _Steps, server: Server | None) -> None:
    model = flags_to_facts(server).get("model") if server is not None else None
    if not isinstance(model, str):
        return
    if catalog.is_repo_id(model):
        step: Step = (catalog.model_config_hf, model, server.hf_hub_dir if server else None)
    elif model.startswith("/"):
        local = host_path(server.mounts, model) if server is not None else None
        step = (catalog.model_config_path, local or model)
    else:
        steps.snap.unread.append(f"the model's config.json: {model[:80]!r} is neither a repo id "
                                 "nor an absolute path")
        return
    [r] = steps.batch([step])
    if r is not None:
        steps.snap.read_model_config(r)


# -- one host ----------------------------------------------------------------------------------

def collect_ssh(target: Target, deadline: float, sessions: dict[str, Any]) -> Snapshot:
    """One host over SSH; `sessions` lets the caller close a stuck connection."""
    from bot.collect.ssh import SshError, SshSession

    started = time.monotonic()
    snap = Snapshot(host=target.name, method="ssh")
    session = SshSession(target)
    sessions[target.name] = session
    try:
        session.connect(deadline)
        collect(snap, session, deadline, target.logs)
    except SshError as exc:
        snap.error = str(exc)
    finally:
        session.close()
        snap.duration_s = round(time.monotonic() - started, 3)
    return snap


# This machine has neither NVML nor nvidia-smi: there is no GPU state to read at all.
NO_DRIVER = ("no NVIDIA driver on this machine (neither libnvidia-ml.so.1 nor nvidia-smi "
             "found): install the NVIDIA driver (it brings both), or check a GPU host over SSH "
             "with `inferbot check HOST`")


def collect_local(deadline: float, nvml: Any = None) -> Snapshot:
    """This machine: NVML when it is there, else the nvidia-smi catalog run locally."""
    started = time.monotonic()
    snap = Snapshot(host=LOCAL_NAME, method="local")
    reading: GpuReading | None
    try:
        reading = read_nvml(nvml if nvml is not None else load_pynvml())
    except (NvmlUnavailable, ImportError) as exc:
        if shutil.which("nvidia-smi") is None:
            snap.error = NO_DRIVER
            return snap
        reading = None
        snap.unread.append(f"{one_line(exc)}; read GPU state with nvidia-smi instead")
    collect(snap, LocalExecutor(), deadline, LogSource(), reading)
    if reading is not None:
        snap.unread.extend(reading.unread)
    snap.duration_s = round(time.monotonic() - started, 3)
    return snap


# -- many hosts --------------------------------------------------------------------------------

def check_hosts(names: Sequence[str], inventory: Inventory | None,
                deadline_s: float = DEFAULT_DEADLINE_S, nvml: Any = None) -> list[Snapshot]:
    """Collect every named host in parallel; results in the order of `names`.

    A name that is not valid or not in the inventory is refused here, before any connection.
    A host that does not finish within `deadline_s` is reported as such; the others are not
    held up by it.
    """
    deadline = time.monotonic() + deadline_s
    results: dict[int, Snapshot] = {}
    jobs: dict[int, Callable[[], Snapshot]] = {}
    sessions: dict[str, Any] = {}
    for i, name in enumerate(names):
        if name == LOCAL_NAME:
            jobs[i] = partial(collect_local, deadline, nvml)
            continue
        try:
            if inventory is None:
                raise HostRefused(f"refused {check_name(name)!r}: no inventory")
            target = inventory.resolve(name)
        except (HostRefused, InventoryError) as exc:
            results[i] = Snapshot(host=name, method="ssh", error=str(exc))
            continue
        jobs[i] = partial(collect_ssh, target, deadline, sessions)
    if jobs:
        pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(jobs)),
                                  thread_name_prefix="inferbot-collect")
        futures: dict[int, Future[Snapshot]] = {i: pool.submit(fn) for i, fn in jobs.items()}
        wait(futures.values(), timeout=max(0.0, deadline - time.monotonic()) + GRACE_S)
        for i, fut in futures.items():
            if fut.done():
                results[i] = fut.result()
            else:  # a worker stuck past every timeout: cut its socket, report the host
                name = names[i]
                session = sessions.get(name)
                if session is not None:
                    threading.Thread(target=session.close, daemon=True).start()
                results[i] = Snapshot(host=name, method="ssh",
                                      error=f"{name}: no result within the {deadline_s:.0f} s "
                                            "deadline")
        pool.shutdown(wait=False, cancel_futures=True)
    return [results[i] for i in range(len(names))]


def audit_records(snapshots: Sequence[Snapshot], who: str | None = None,
                  run_id: str | None = None) -> list[CommandRun]:
    """One audit record per command run; the records of one check share a run id. The
    caller stores them (bot.flows), so the collector never touches the database."""
    run_id = run_id or uuid.uuid4().hex
    return [CommandRun(host=snap.host, command_id=r.id, duration_s=r.duration_s,
                       exit_code=r.rc, bytes_out=r.bytes, error=r.error, run_id=run_id, who=who)
            for snap in snapshots for r in snap.commands]
