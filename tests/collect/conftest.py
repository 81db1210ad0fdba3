"""A real OpenSSH sshd on loopback, one port per scenario, with stand-in GPU tools.

One sshd serves every scenario: each scenario gets its own port, and a `Match LocalPort` block
sets the session's PATH (stand-ins first) and INFERBOT_TEST_SCENARIO (which recorded outputs
the stand-ins print). The client side is the real collector: paramiko, the inventory, the
known_hosts file, key authentication. Logging in as the user running the tests works both as
root (CI) and as an ordinary developer.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bot.collect.inventory import Inventory, load_inventory

SSHD = "/usr/sbin/sshd"
HERE = Path(__file__).parent
DATA = HERE / "data"
SCENARIOS = ("healthy", "kv", "driver", "mig", "hang", "spew")
HF_MODELS = ("Qwen/Qwen2.5-7B-Instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1")


@dataclass
class Sshd:
    root: Path
    ports: dict[str, int]
    user: str
    key: Path
    known_hosts: Path
    host_pub: str  # "ssh-ed25519 AAAA..."
    log: Path

    def inventory(self, tmp: Path, hosts: dict[str, dict[str, object]],
                  known_hosts: Path | None = None, ssh_config: Path | None = None) -> Inventory:
        """An inventory file whose `hosts` map name -> fields (scenario -> port)."""
        entries = []
        for name, fields in hosts.items():
            entry: dict[str, object] = {"name": name, "address": "127.0.0.1",
                                        "user": self.user, "key": str(self.key),
                                        "look_for_keys": False, "allow_agent": False}
            scenario = fields.get("scenario")
            if scenario is not None:
                entry["port"] = self.ports[str(scenario)]
            entry.update({k: v for k, v in fields.items() if k != "scenario"})
            entries.append(entry)
        path = tmp / "hosts.yaml"
        path.write_text(yaml.safe_dump({
            "known_hosts": str(known_hosts or self.known_hosts),
            "ssh_config": str(ssh_config or tmp / "no-ssh-config"),
            "hosts": entries}))
        return load_inventory(path)


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_for_banner(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0-"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


def _scenarios(root: Path) -> None:
    for src in (DATA / "scenarios").iterdir():
        dst = root / "scenarios" / src.name
        dst.mkdir(parents=True)
        for f in src.iterdir():
            (dst / f.name).write_text(f.read_text().replace("@ROOT@", str(root)))
    for name in ("hang", "spew"):
        (root / "scenarios" / name).mkdir()
        (root / "scenarios" / name / f"smi_{name}").write_text("")
    for repo in HF_MODELS:
        folder = root / "hf" / "hub" / ("models--" + repo.replace("/", "--"))
        snap = folder / "snapshots" / "0123abcd"
        snap.mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("0123abcd")
        text = (DATA / "model_configs" / (repo.replace("/", "--") + ".json")).read_text()
        (snap / "config.json").write_text(text.split("\n", 1)[1])


class SshdFailed(RuntimeError):
    pass


def start_sshd(root: Path, scenarios: tuple[str, ...] = SCENARIOS
               ) -> tuple[Sshd, subprocess.Popen[bytes]]:
    """Keys, stand-ins, scenario data and a running sshd under `root` (as root or not)."""
    os.chmod(root, 0o755)
    for key in ("host_ed25519", "client_ed25519", "other_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)],
                       check=True)
    shutil.copy(root / "client_ed25519.pub", root / "authorized_keys")
    os.chmod(root / "authorized_keys", 0o644)
    bin_dir = root / "bin"
    shutil.copytree(HERE / "standins", bin_dir)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    _scenarios(root)
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    log = root / "sshd.log"
    for _attempt in range(3):  # a port picked free can be taken before sshd binds it
        ports = dict(zip(scenarios, free_ports(len(scenarios)), strict=True))
        cfg = [f"Port {p}" for p in ports.values()] + [
            "ListenAddress 127.0.0.1", f"HostKey {root}/host_ed25519",
            f"PidFile {root}/sshd.pid", f"AuthorizedKeysFile {root}/authorized_keys",
            "StrictModes no", "UsePAM no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
            "MaxStartups 100:30:200", "MaxSessions 50", "LogLevel VERBOSE"]
        for name, port in ports.items():
            cfg += [f"Match LocalPort {port}",
                    f"  SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin "
                    f"INFERBOT_TEST_SCENARIO={root}/scenarios/{name}"]
        (root / "sshd_config").write_text("\n".join(cfg) + "\n")
        subprocess.run([SSHD, "-t", "-f", str(root / "sshd_config")], check=True)
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
                                stdout=log.open("ab"), stderr=subprocess.STDOUT)
        if all(_wait_for_banner(p, time.monotonic() + 10) for p in ports.values()):
            break
        proc.terminate()
        proc.wait(timeout=5)
    else:
        raise SshdFailed(f"sshd did not start; see {log}")
    host_pub = " ".join((root / "host_ed25519.pub").read_text().split()[:2])
    known = root / "known_hosts"
    known.write_text("".join(f"[127.0.0.1]:{p} {host_pub}\n" for p in ports.values()))
    return Sshd(root=root, ports=ports, user=getpass.getuser(), key=root / "client_ed25519",
                known_hosts=known, host_pub=host_pub, log=log), proc


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not os.path.exists(SSHD):
        pytest.skip("openssh-server is not installed (/usr/sbin/sshd missing; "
                    "`apt-get install openssh-server`, as .ci/run does)")
    try:
        server, proc = start_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdFailed as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=5)
