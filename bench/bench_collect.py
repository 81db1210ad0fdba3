"""Collection speed: 32 inventory hosts on loopback, in parallel, against two baselines.

Starts the tests' real OpenSSH sshd (stand-in nvidia-smi, docker, ps printing recorded outputs),
writes an inventory of N hosts that all point at it, and measures in the same run:
  - one host alone;
  - the N hosts one after another (the same collector, sequentially): parallel must be >= 3x
    faster;
  - the N hosts in parallel (`check_hosts`, what `inferbot check h1 ... hN` does);
  - N OpenSSH `ssh` clients started in parallel, each running the same catalog commands in one
    session: the fair floor on a machine where both ends' crypto share the same cores;
  - with a 50 ms round trip: netem in a network namespace where the kernel has it, else a
    user-space proxy that delays every chunk by 25 ms each way (said in the output).
The loopback figures are taken as the current user and, when run as root, again as a throwaway
service user whose login shell is /bin/sh (root's bash rc files here cost more CPU per host than
the whole catalog; a fleet's read-only account usually has none). Both baselines log in as the
same user as the collector.
Usage: python bench/bench_collect.py [--hosts 32]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.collect import catalog  # noqa: E402
from bot.collect.inventory import Inventory  # noqa: E402
from bot.collect.runner import check_hosts  # noqa: E402
from bot.collect.snapshot import Snapshot  # noqa: E402
from tests.fixtures.sshd import Sshd, free_ports, start_sshd  # noqa: E402

DELAY_S = 0.025  # each way: a 50 ms round trip


def timed(fn: Callable[[], list[Snapshot]]) -> tuple[float, list[Snapshot]]:
    t0 = time.perf_counter()
    snaps = fn()
    elapsed = time.perf_counter() - t0
    bad = [s.error or s.unread for s in snaps if s.error or s.unread]
    if bad:
        raise SystemExit(f"collection incomplete: {bad[0]}")
    return elapsed, snaps


def same_commands(run: Callable[[], list[Snapshot]]) -> tuple[float, list[catalog.Command]]:
    """Time one collection and record the catalog commands it sent, to give OpenSSH."""
    from bot.collect.ssh import SshSession

    sent: list[catalog.Command] = []
    original = SshSession.run

    def spy(self: SshSession, cmds: Sequence[catalog.Command], deadline: float) -> Any:
        sent.extend(cmds)
        return original(self, cmds, deadline)

    SshSession.run = spy  # type: ignore[method-assign]
    try:
        elapsed, _ = timed(run)
    finally:
        SshSession.run = original  # type: ignore[method-assign]
    return elapsed, sent


def openssh_parallel(sshd: Sshd, port: int, n: int, cmds: list[catalog.Command]) -> float:
    script = "; ".join(c.line() for c in cmds)
    argv = ["ssh", "-q", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={sshd.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-i", str(sshd.key),
            "-p", str(port), f"{sshd.user}@127.0.0.1", script]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(n)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise SystemExit(f"ssh failed ({p.returncode}): {err.decode()[:200]}")
    return time.perf_counter() - t0


class DelayProxy:
    """127.0.0.1:port -> target, every chunk held back DELAY_S in each direction."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_until_complete(server.serve_forever())

    async def _client(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.target)
        await asyncio.gather(self._pipe(r, uw), self._pipe(ur, w), return_exceptions=True)
        for writer in (w, uw):
            writer.close()

    @staticmethod
    async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def later() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    w.close()
                    return
                w.write(data)
                await w.drain()

        task = asyncio.ensure_future(later())
        while True:
            try:
                data = await r.read(65536)
            except ConnectionError:
                data = b""
            await queue.put((time.monotonic() + DELAY_S, data))
            if not data:
                break
        await task


def netem_available() -> bool:
    ns = f"inferbot-bench-{os.getpid()}"
    try:
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
            return False
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
                       capture_output=True)
        r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo",
                            "root", "netem", "delay", "25ms"], capture_output=True, text=True)
        print(f"  netem: {'available' if r.returncode == 0 else r.stderr.strip()}")
        return r.returncode == 0
    except FileNotFoundError:
        return False
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextmanager
def service_user(home: Path) -> Iterator[str | None]:
    """As root: a throwaway account with /bin/sh and no rc files, like a fleet's read-only
    service user (root's login shell here is bash with heavy rc files, started once per host)."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        yield None
        return
    name = f"ib-bench-{os.getpid()}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", str(home),
                    "--shell", "/bin/sh", name], check=True, capture_output=True)
    try:
        subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
        yield name
    finally:
        # -f: its last sshd sessions may still be closing
        if subprocess.run(["userdel", "-f", name], capture_output=True).returncode != 0:
            print(f"warning: could not remove the account {name}; run: userdel -f {name}")


def loopback(sshd: Sshd, tmp: Path, n: int) -> None:
    hosts: dict[str, dict[str, object]] = {f"gpu-{i:02d}": {"scenario": "healthy"}
                                           for i in range(n)}
    inv: Inventory = sshd.inventory(tmp, hosts)
    names = list(hosts)
    shell = pwd.getpwnam(sshd.user).pw_shell
    timed(lambda: check_hosts(names[:1], inv))  # warm caches, imports, the first key
    one, cmds = same_commands(lambda: check_hosts(names[:1], inv))
    seq, _ = timed(lambda: [check_hosts([h], inv)[0] for h in names])
    par, _ = timed(lambda: check_hosts(names, inv))
    ossh = openssh_parallel(sshd, sshd.ports["healthy"], n, cmds)
    print(f"{n} hosts on loopback as {sshd.user} (login shell {shell}), {len(cmds)} catalog "
          f"commands each, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}:")
    print(f"  one host                      {one:6.2f} s")
    print(f"  one after another             {seq:6.2f} s")
    print(f"  in parallel                   {par:6.2f} s   {seq / par:4.1f}x faster than "
          "one after another (need >= 3x)")
    print(f"  {n} parallel OpenSSH clients  {ossh:6.2f} s   inferbot / OpenSSH = "
          f"{par / ossh:4.2f} (need <= 1)")


def far(sshd: Sshd, tmp: Path, n: int) -> None:
    print(f"50 ms round trip, as {sshd.user}:")
    if netem_available():
        print("  (netem works here; this bench still measures through the proxy below)")
    else:
        print("  netem is not available in this kernel: a user-space proxy delays every chunk "
              "25 ms each way instead")
    proxy = DelayProxy(sshd.ports["healthy"])
    kh = tmp / "known_hosts_proxy"
    kh.write_text(f"[127.0.0.1]:{proxy.port} {sshd.host_pub}\n")
    names = [f"gpu-{i:02d}" for i in range(n)]
    inv = sshd.inventory(tmp, {h: {"port": proxy.port} for h in names}, known_hosts=kh)
    one, _ = timed(lambda: check_hosts(names[:1], inv))
    par, _ = timed(lambda: check_hosts(names, inv))
    print(f"  one host                      {one:6.2f} s")
    print(f"  {n} hosts in parallel          {par:6.2f} s   {par / one:4.2f}x one host "
          "(need <= 2x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=32)
    n = ap.parse_args().hosts
    with tempfile.TemporaryDirectory(prefix="inferbot-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # the service user reads the stand-ins and keys' public half
        (tmp / "sshd").mkdir()
        sshd, proc = start_sshd(tmp / "sshd", ("healthy",))
        try:
            loopback(sshd, tmp, n)
            with service_user(tmp) as user:
                if user is not None:
                    service = dataclasses.replace(sshd, user=user)
                    loopback(service, tmp, n)
                    far(service, tmp, n)
                else:
                    far(sshd, tmp, n)
        finally:
            proc.terminate()
            proc.wait(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
