"""Running catalog commands and what comes back: one batch format for SSH and for local runs.

Commands that do not depend on each other's output run as one batch in one session: every
SSH session starts a login shell (with the user's rc files) on the host, which costs more than
the commands themselves, and every session is more round trips on a far host. Inside the batch
each command keeps its own bounds (catalog.Command.line: `timeout -k`, `head -c`); a line
`<token>:<i>` on stdout opens command i's output and `<token>:<i>:<rc>` on stderr reports its
exit status. The token is random per batch, so no output can fake a boundary it did not see. A final
`<token>:end` line closes the batch, which lets one remote shell run batch after batch.

Both executors send the same shell line, so a command behaves the same on a remote host and on
this machine, and one parser reads both. Results are redacted here, the one place raw host
output passes through: nothing unredacted is stored or shown.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from bot.collect.catalog import Command

GRACE_S = 3.0  # beyond a command's own remote timeout: `timeout -k 2` and the trip back
STDERR_CAP = 64 * 1024


class CommandResult(BaseModel):
    """What one command returned. `output` is stdout and stderr merged, redacted, capped."""

    model_config = ConfigDict(extra="forbid")

    id: str
    command: str
    rc: int | None = None  # None: no exit status (killed, timed out, channel lost)
    output: str = ""
    bytes: int = 0
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    error: str | None = None  # one line, when the command could not run or finish

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.error is None


class Executor(Protocol):
    def run(self, cmds: Sequence[Command], deadline: float) -> list[CommandResult]:
        """Run `cmds` in order as one batch; return by `deadline` (time.monotonic())."""


def redact_text(text: str) -> str:
    from bot.evidence.redact import redact

    return redact(text)


class Batch:
    """The shell line for a batch, and the bookkeeping while its output streams back."""

    def __init__(self, cmds: Sequence[Command]) -> None:
        self.cmds = list(cmds)
        self.token = f"inferbot-{secrets.token_hex(8)}"
        self.started = time.monotonic()
        self.out = bytearray()
        self.err = bytearray()
        self.ended: dict[int, tuple[float, int]] = {}  # i -> (when, rc)
        self.cap = sum(c.max_bytes + 64 for c in self.cmds)
        self._err_scanned = 0
        self._end = f"\n{self.token}:end\n".encode()
        self._end_seen = False

    def line(self) -> str:
        """One line: each command framed and bounded, then an end mark (the shell runs them in
        order, so the end mark on stdout comes after every command's output)."""
        parts = []
        for i, c in enumerate(self.cmds):
            parts.append(f"printf '\\n{self.token}:{i}\\n'; {c.line(f'{self.token}:{i}:')}")
        parts.append(f"printf '\\n{self.token}:end\\n'")
        return "; ".join(parts)

    def budget(self) -> float:
        """How long the batch may take: its commands run one after another."""
        return sum(c.timeout_s for c in self.cmds) + GRACE_S

    def feed_out(self, data: bytes) -> None:
        start = max(0, len(self.out) - len(self._end))
        self.out += data
        self._end_seen = self._end_seen or self.out.find(self._end, start) != -1

    def feed_err(self, data: bytes) -> None:
        if len(self.err) < STDERR_CAP:
            self.err += data
        now = time.monotonic()
        end = self.err.rfind(b"\n") + 1
        for raw in bytes(self.err[self._err_scanned:end]).splitlines():
            token, _, rest = raw.decode("utf-8", "replace").partition(":")
            i, _, rc = rest.partition(":")
            if token == self.token and i.isdigit() and rc.isdigit():
                self.ended[int(i)] = (now, int(rc))
        self._err_scanned = end

    @property
    def done(self) -> bool:
        """Every command's output and exit status are in (the streams arrive separately)."""
        return self._end_seen and len(self.ended) == len(self.cmds)

    @property
    def overflowing(self) -> bool:
        """More than every command's cap together: the remote `head -c` did not hold."""
        return len(self.out) > self.cap

    def results(self, *, timed_out: bool = False, error: str | None = None
                ) -> list[CommandResult]:
        sections: dict[int, bytes] = {}
        for piece in bytes(self.out).split(f"\n{self.token}:".encode())[1:]:
            head, _, section = piece.partition(b"\n")
            if head.isdigit():
                sections[int(head)] = section
        out: list[CommandResult] = []
        last_end = self.started
        for i, cmd in enumerate(self.cmds):
            when, rc = self.ended.get(i, (None, None))
            body = sections.get(i)
            got = body or b""
            result = CommandResult(
                id=cmd.id, command=cmd.display, rc=rc,
                output=redact_text(got[:cmd.max_bytes].decode("utf-8", "replace")),
                bytes=len(got), truncated=len(got) >= cmd.max_bytes,
                duration_s=round((when or time.monotonic()) - last_end, 3))
            if rc == 124:
                result.timed_out = True
                result.error = f"{cmd.id} timed out after {cmd.timeout_s} s"
            elif rc is None:
                started = body is not None
                result.timed_out = timed_out and started
                result.error = error or (
                    f"{cmd.id} did not finish before the deadline" if started
                    else f"{cmd.id}: not run, the host's deadline was reached")
            out.append(result)
            last_end = when or last_end
        return out


class LocalExecutor:
    """Runs catalog commands on this machine (the `--local` fallback when NVML is missing)."""

    def run(self, cmds: Sequence[Command], deadline: float) -> list[CommandResult]:
        batch = Batch(cmds)
        deadline = min(deadline, batch.started + batch.budget())
        proc = subprocess.Popen(["/bin/sh", "-c", batch.line()], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, batch.feed_out)
        sel.register(proc.stderr, selectors.EVENT_READ, batch.feed_err)
        timed_out = False
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0 or batch.overflowing:
                    timed_out = left <= 0
                    break
                for key, _ in sel.select(min(left, 0.5)):
                    data = os.read(key.fd, 65536)
                    if data:
                        key.data(data)
                    else:
                        sel.unregister(key.fileobj)
        finally:
            sel.close()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        return batch.results(timed_out=timed_out)
