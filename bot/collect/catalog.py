"""The command catalog: the only commands inferbot runs on a host, all read-only.

Every command line is built here from constants and from values that passed a strict pattern:
inventory fields (container, unit, log path) or values read back from the host itself (a PID is
digits, a container id is 64 hex digits, a model is an `org/name` repo id or an absolute path).
Chat text never reaches this module. Values are passed as shell-quoted arguments, and scripts
refer to them as "$1", so a value is data to the remote shell, never code.

Each command is bounded on the remote side too, because closing an SSH channel does not stop
the remote process: `timeout -k 2 N` ends it, `head -c BYTES` caps what comes back. stdout and
stderr are merged (`2>&1`), in the order the program wrote them; the exit status travels
separately on stderr, so it survives the pipe into head (bot.collect.execute frames a batch).
"""

from __future__ import annotations

import re
import shlex

from bot.structs import struct

KIB = 1024
MIB = 1024 * KIB

LOG_LINES = 500
LOG_SINCE = "2h"  # a restart loop should not return hours of identical start-up spam

GPU_FIELDS = ("index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,"
              "temperature.gpu,driver_version")
# process_name last: it is free text from the workload and may contain ", "
APP_FIELDS = "gpu_uuid,pid,used_memory,process_name"

_PID = re.compile(r"^[1-9][0-9]{0,9}$")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._:+-]{0,199}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_ABS_PATH = re.compile(r"^/[A-Za-z0-9@._:+/-]{0,1000}$")


class UnsafeValue(ValueError):
    """A value that does not fit its pattern; the command is not built."""


@struct(frozen=True, slots=True)
class Command:
    """One catalog entry: an id for the audit trail, an argv, and its bounds."""

    id: str
    argv: tuple[str, ...]
    timeout_s: int = 10
    max_bytes: int = 1 * MIB

    def line(self, status: str = "rc=") -> str:
        """The shell line for the host: bounded in time and size, streams merged, and the
        exit status written to stderr after `status` (it must survive the pipe into head)."""
        inner = shlex.join(self.argv)
        return (f"( timeout -k 2 {self.timeout_s} {inner} </dev/null 2>&1; "
                f"echo \"{status}$?\" >&2 ) | head -c {self.max_bytes}")

    @property
    def display(self) -> str:
        return shlex.join(self.argv)


def _sh(cmd_id: str, script: str, *args: str, timeout_s: int = 10,
        max_bytes: int = 1 * MIB) -> Command:
    """A constant script run by `sh -c`, with values as positional arguments."""
    return Command(cmd_id, ("sh", "-c", script, "sh", *args), timeout_s, max_bytes)


def _check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if not pattern.fullmatch(value) or "/../" in f"{value}/" or "/./" in f"{value}/":
        raise UnsafeValue(f"refusing {what} {value[:80]!r}")
    return value


def pid_arg(pid: int) -> str:
    return _check(_PID, str(pid), "pid")


def container_arg(ref: str) -> str:
    """A container name from the inventory, or an id read from /proc/PID/cgroup."""
    if _CONTAINER_ID.fullmatch(ref):
        return ref
    return _check(_TOKEN, ref, "container")


# -- GPU state ---------------------------------------------------------------------------------

def gpu_query() -> Command:
    return Command("nvidia-smi-query-gpu",
                   ("nvidia-smi", f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"))


def gpu_apps() -> Command:
    return Command("nvidia-smi-query-apps",
                   ("nvidia-smi", f"--query-compute-apps={APP_FIELDS}",
                    "--format=csv,noheader,nounits"))


def gpu_table() -> Command:
    """The human table, shown verbatim; also carries the CUDA version and MIG devices."""
    return Command("nvidia-smi", ("nvidia-smi",), max_bytes=256 * KIB)


# -- the server process ------------------------------------------------------------------------

def processes() -> Command:
    """Every process with its parent and cgroup (PID -> container), parsed locally.

    The cgroup column is what /proc/PID/cgroup holds; 512 wide so a Kubernetes path is not cut.
    """
    return Command("ps", ("ps", "-eo", "pid=,ppid=,cgroup:512=,args="), max_bytes=4 * MIB)


def cmdline(pid: int) -> Command:
    """The exact argv from /proc (NUL-separated) as one shell-quoted line (coreutils printf
    %q): arguments with spaces survive, and `--api-key X` reads as text the redactor knows."""
    return _sh("proc-cmdline", "xargs -0 -r printf '%q ' < \"/proc/$1/cmdline\"", pid_arg(pid),
               max_bytes=64 * KIB)


def docker_inspect(ref: str) -> Command:
    return Command("docker-inspect", ("docker", "inspect", "--type", "container",
                                      container_arg(ref)), max_bytes=1 * MIB)


def systemd_show(unit: str) -> Command:
    return Command("systemctl-show", ("systemctl", "show", "--no-pager", "-p", "ExecStart",
                                      "-p", "Environment", _check(_TOKEN, unit, "unit")),
                   max_bytes=64 * KIB)


def driver_module() -> Command:
    """The loaded kernel module's version: still readable when nvidia-smi is not, and it
    differs from the library's after a driver upgrade without a reboot."""
    return Command("driver-version", ("cat", "/proc/driver/nvidia/version"), max_bytes=16 * KIB)


def engine_version(exe: str) -> Command:
    """The installed package version, from the `*.dist-info` folder next to the server's own
    interpreter or entry script (venv, conda, /usr/local); no Python is started."""
    script = ('d=$(dirname -- "$1"); ls -d -- "$d"/../lib/python3*/*-packages/vllm-*.dist-info '
              '"$d"/../lib/python3*/*-packages/sglang-*.dist-info 2>/dev/null; true')
    return _sh("engine-version", script, _check(_ABS_PATH, exe, "executable"),
               max_bytes=16 * KIB)


# -- logs --------------------------------------------------------------------------------------

def logs_docker(ref: str) -> Command:
    return Command("docker-logs", ("docker", "logs", "--tail", str(LOG_LINES), "--since",
                                   LOG_SINCE, container_arg(ref)), timeout_s=15)


def logs_journal(unit: str) -> Command:
    return Command("journalctl", ("journalctl", "-u", _check(_TOKEN, unit, "unit"), "-n",
                                  str(LOG_LINES), "--no-pager", "-o", "short-iso", "--since",
                                  f"-{LOG_SINCE}"), timeout_s=15)


def logs_file(path: str) -> Command:
    return Command("tail-log", ("tail", "-n", str(LOG_LINES), "--",
                                _check(_ABS_PATH, path, "log path")), timeout_s=15)


def logs_of_pid(pid: int) -> Command:
    """The file the process writes its stdout to (nohup / tmux launches), if it is a file."""
    script = ('f=$(readlink "/proc/$1/fd/1") || exit 1; case "$f" in '
              '/*) [ -f "$f" ] && exec tail -n "$2" -- "$f";; esac; '
              'echo "stdout of pid $1 is $f, not a log file"')
    return _sh("tail-stdout", script, pid_arg(pid), str(LOG_LINES), timeout_s=15)


# -- the model's config.json -------------------------------------------------------------------

def model_config_hf(repo_id: str, hub_dir: str | None = None) -> Command:
    """config.json from the Hugging Face cache: refs/main's snapshot, else the newest one.

    `hub_dir` is the host side of a container's HF cache mount; default $HF_HUB_CACHE,
    $HF_HOME/hub, ~/.cache/huggingface/hub of the login user.
    """
    folder = "models--" + _check(_REPO_ID, repo_id, "model").replace("/", "--")
    script = ('h="${2:-${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}}"; '
              'd="$h/$1"; r=$(cat "$d/refs/main" 2>/dev/null); '
              'if [ -n "$r" ] && [ -f "$d/snapshots/$r/config.json" ]; then '
              'exec cat "$d/snapshots/$r/config.json"; fi; '
              'c=$(ls -t "$d"/snapshots/*/config.json 2>/dev/null | head -n 1); '
              '[ -n "$c" ] && exec cat "$c"; echo "no config.json under $d"; exit 1')
    args = [folder] + ([_check(_ABS_PATH, hub_dir, "cache dir")] if hub_dir else [])
    return _sh("model-config", script, *args, max_bytes=256 * KIB)


def model_config_path(model_dir: str) -> Command:
    return Command("model-config", ("cat", "--", _check(_ABS_PATH, model_dir.rstrip("/"),
                                                        "model path") + "/config.json"),
                   max_bytes=256 * KIB)


def is_repo_id(model: str) -> bool:
    return bool(_REPO_ID.fullmatch(model))
