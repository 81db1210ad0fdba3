"""SSH to one inventory host with paramiko: verified host key, key authentication, bounded reads.

- Host keys are checked against the inventory's known_hosts and never written: an unknown key
  or a changed key refuses the connection with one line that says how to add it.
- Authentication is by key only: no password is ever passed, so paramiko never tries one.
- Every blocking step has a timeout no later than the host's deadline; output is read from both
  streams in one loop with select(), so a chatty stderr cannot deadlock a full stdout window.
- One remote `sh` per host runs every batch (fed on its stdin), so the login shell and its rc
  files start once per host; a batch cut short closes that shell, and the next opens a new one.
- One client per host and thread; `close()` from another thread unblocks a stuck worker.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko

from bot.collect.catalog import Command
from bot.collect.execute import Batch, CommandResult
from bot.collect.inventory import Endpoint, Target
from bot.errors import one_line

CONNECT_TIMEOUT_S = 10.0
# paramiko's transport thread logs each failure as a traceback, one record per line, at ERROR
# (a silent host gave 20 lines on stderr); the SshError below is the one line that says it.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)


class SshError(Exception):
    """A connection that could not be made. `str()` is one line for the user."""


class _UnknownHostKey(paramiko.SSHException):  # type: ignore[misc]
    def __init__(self, name: str, key: Any) -> None:
        super().__init__(name)
        self.name, self.key = name, key


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """RejectPolicy, but keeping the offered key so the message can show its fingerprint."""

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        raise _UnknownHostKey(hostname, key)


def _keyscan_hint(ep: Endpoint, known_hosts: str) -> str:
    port = f"-p {ep.port} " if ep.port != 22 else ""
    return f"ssh-keyscan {port}{ep.address} >> {known_hosts}"


class SshSession:
    """An open connection to `target` (through its jump host, if any)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._clients: list[Any] = []
        self._chan: Any = None

    def connect(self, deadline: float) -> None:
        sock = None
        if self.target.jump is not None:
            jump = self._client(self.target.jump, deadline, None, "jump host ")
            transport = jump.get_transport()
            ep = self.target.endpoint
            try:
                sock = transport.open_channel("direct-tcpip", (ep.address, ep.port),
                                              ("127.0.0.1", 0), timeout=_left(deadline))
            except (paramiko.SSHException, OSError) as exc:
                raise SshError(f"jump host could not reach {ep.address}:{ep.port}: "
                               f"{one_line(exc)}") from None
        self._client(self.target.endpoint, deadline, sock, "")

    def _client(self, ep: Endpoint, deadline: float, sock: Any, role: str) -> Any:
        client = paramiko.SSHClient()
        self._clients.append(client)
        kh = self.target.known_hosts
        if Path(kh).is_file():
            try:
                client.load_host_keys(kh)
            except (OSError, paramiko.SSHException) as exc:
                raise SshError(f"cannot read {kh}: {one_line(exc)}") from None
        client.set_missing_host_key_policy(_RefuseUnknown())
        t = min(ep.timeout_s or CONNECT_TIMEOUT_S, _left(deadline))
        where = f"{role}{ep.known_hosts_name}"
        started = time.monotonic()
        try:
            client.connect(hostname=ep.address, port=ep.port, username=ep.user,
                           key_filename=list(ep.key_files) or None,
                           allow_agent=ep.allow_agent, look_for_keys=ep.look_for_keys,
                           timeout=t, banner_timeout=t, auth_timeout=t, channel_timeout=t,
                           sock=sock)
        except _UnknownHostKey as exc:
            fp = exc.key.fingerprint
            raise SshError(f"refused {where}: unknown host key ({fp}) not in {kh}; verify the "
                           f"fingerprint, then: {_keyscan_hint(ep, kh)}") from None
        except paramiko.BadHostKeyException as exc:
            raise SshError(f"refused {where}: host key CHANGED (now {exc.key.fingerprint}, "
                           f"expected {exc.expected_key.fingerprint}); if the host was rebuilt, "
                           f"verify it, then: ssh-keygen -R '{ep.known_hosts_name}' -f {kh} && "
                           f"{_keyscan_hint(ep, kh)}") from None
        except paramiko.AuthenticationException:
            keys = ", ".join(ep.key_files) or "agent/default keys"
            raise SshError(f"authentication failed for {ep.user}@{where} (key only; tried "
                           f"{keys})") from None
        except paramiko.ssh_exception.NoValidConnectionsError:
            raise SshError(f"connection refused by {where}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            # a silent peer shows up as a timeout, a banner error or a dead session, by phase
            # (TCP connect timing out is TimeoutError; past it, a peer that accepted and said
            # nothing until the timeout never sent its banner)
            if isinstance(exc, TimeoutError) and "banner" not in str(exc):
                raise SshError(f"no answer from {where} within {t:.0f} s") from None
            if "banner" in str(exc) or time.monotonic() >= started + t - 0.05:
                raise SshError(f"no SSH banner within {t:.0f} s") from None
            raise SshError(f"cannot connect to {where}: {one_line(exc)}") from None
        return client

    def run(self, cmds: Sequence[Command], deadline: float) -> list[CommandResult]:
        """Run a batch in this host's shell; read stdout and stderr together until the batch's
        end mark and every exit status are in, the output overflows, or the deadline."""
        batch = Batch(cmds)
        deadline = min(deadline, batch.started + batch.budget())
        try:
            chan = self._shell(deadline)
            chan.sendall(batch.line().encode() + b"\n")
            while not batch.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._drop_shell()  # it may still print this batch's output: never reuse
                    return batch.results(timed_out=True)
                select.select([chan], [], [], min(left, 0.5))
                while chan.recv_ready():
                    batch.feed_out(chan.recv(65536))
                while chan.recv_stderr_ready():
                    batch.feed_err(chan.recv_stderr(65536))
                if batch.overflowing:  # the remote head -c should have stopped it
                    self._drop_shell()
                    return batch.results()
                if chan.exit_status_ready() and not chan.recv_ready() \
                        and not chan.recv_stderr_ready() and not batch.done:
                    self._drop_shell()
                    return batch.results(error=f"the remote shell exited "
                                               f"({chan.recv_exit_status()})")
            return batch.results()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._drop_shell()
            return batch.results(error=f"connection lost: {one_line(exc)}")

    def _shell(self, deadline: float) -> Any:
        """One `sh` per host, fed batch after batch on stdin: the login shell and its rc files
        start once per host, not once per command."""
        if self._chan is None:
            self._chan = self._clients[-1].get_transport().open_session(timeout=_left(deadline))
            self._chan.exec_command("exec /bin/sh -s")
        return self._chan

    def _drop_shell(self) -> None:
        if self._chan is not None:
            self._chan.close()
            self._chan = None

    def close(self) -> None:
        """Close every client (target first); safe from any thread, safe to call twice."""
        self._drop_shell()
        for client in reversed(self._clients):
            client.close()


def _left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())
