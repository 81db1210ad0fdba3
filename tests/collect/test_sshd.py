"""The collector against a real OpenSSH sshd on loopback: scenarios and failures."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from bot.collect.runner import check_hosts
from bot.collect.snapshot import Snapshot
from bot.schema import Diagnosis
from tests.fixtures.sshd import Sshd, free_ports

pytestmark = pytest.mark.sshd


def _one(sshd: Sshd, tmp_path: Path, scenario: str, deadline_s: float = 20.0,
         **fields: object) -> Snapshot:
    inv = sshd.inventory(tmp_path, {"gpu-01": {"scenario": scenario, **fields}})
    [snap] = check_hosts(["gpu-01"], inv, deadline_s=deadline_s)
    return snap


# -- scenarios ---------------------------------------------------------------------------------

def test_healthy_host_in_docker(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "healthy")
    assert snap.error is None, snap.error
    facts = snap.facts()
    assert facts.gpu_name == "NVIDIA H200" and facts.gpu_count == 1
    assert facts.gpu_total_gib == pytest.approx(143771 / 1024, abs=0.01)
    assert facts.driver_version == "590.48.01" and facts.cuda_version == "13.1"
    # the V1 worker holds the GPU; its parent `vllm serve` carries the flags (docker inspect)
    assert snap.server is not None and snap.server.engine == "vllm"
    assert snap.server.argv_source == "docker inspect"
    assert facts.model == "Qwen/Qwen2.5-7B-Instruct"
    assert facts.max_model_len == 32768 and facts.gpu_memory_utilization == 0.9
    assert facts.engine_version == "0.10.1"
    [proc] = facts.processes
    assert proc.is_server and proc.pid == 2412 and proc.container == "4f1c2a7b9d3e"
    assert facts.foreign_processes_gib == 0.0
    assert snap.model_config_json is not None
    assert snap.model_config_json["num_key_value_heads"] == 4
    assert "Avg generation throughput" in snap.logs
    assert snap.logs_source.startswith("docker logs --tail 500 --since 2h 4f1c2a7b")
    # secrets from the container's Env and argv never leave the executor unredacted
    every = "".join(r.output for r in snap.commands) + snap.evidence().text
    assert "hf_abcdefghij" not in every
    assert "s3cr3t-Key" not in snap.evidence().text


def test_kv_cache_failure_with_foreign_process(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "kv", logs={"source": "docker", "container": "vllm"})
    assert snap.error is None, snap.error
    facts = snap.facts()
    assert facts.foreign_processes_gib == 20.0
    [proc] = facts.processes
    assert proc.name == "/root/tools/memhog" and proc.is_server is False
    assert facts.model == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert facts.gpu_memory_utilization == 0.75 and facts.max_model_len == 32768
    assert "No available memory for the cache blocks" in snap.logs
    assert snap.model_config_json is not None
    assert snap.model_config_json["model_type"] == "mixtral"


def test_driver_failure(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "driver", logs={"source": "systemd", "unit": "vllm.service"})
    assert snap.error is None
    assert "couldn't communicate with the NVIDIA driver" in snap.evidence().text
    assert any(u.startswith("GPU memory:") and "exited 9" in u for u in snap.unread)
    assert snap.server is not None and snap.server.unit == "vllm.service"
    assert snap.facts().model == "meta-llama/Llama-3.1-8B-Instruct"
    assert "Found no NVIDIA driver" in snap.logs


@pytest.mark.slow
def test_mig_host(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "mig")
    facts = snap.facts()
    physical = [g for g in facts.gpus if g.mig_instance is None]
    migs = [g for g in facts.gpus if g.mig_instance is not None]
    assert len(physical) == 1 and physical[0].mig_mode == "Enabled"
    assert physical[0].utilization_pct is None  # [N/A] under MIG is unknown, not 0
    assert [(m.index, m.mig_instance, m.total_mib) for m in migs][:2] == [
        (0, "GI 2/CI 0", 71424), (1, "GI 2/CI 1", 71424)]
    assert len(migs) == 5
    assert facts.foreign_processes_gib == pytest.approx((2194 + 1170 + 13526) / 1024, abs=0.01)
    assert any("no server found" in u for u in snap.unread)


# -- failures: each one line, within its deadline ---------------------------------------------

@pytest.mark.slow
def test_hanging_command_costs_only_the_deadline(sshd: Sshd, tmp_path: Path) -> None:
    t0 = time.monotonic()
    snap = _one(sshd, tmp_path, "hang", deadline_s=3)
    assert time.monotonic() - t0 < 5
    first = snap.commands[0]
    assert first.timed_out and first.rc is None
    assert any("not run, the host's deadline was reached" in u for u in snap.unread)


@pytest.mark.slow
def test_fifty_megabytes_are_capped(sshd: Sshd, tmp_path: Path) -> None:
    t0 = time.monotonic()
    snap = _one(sshd, tmp_path, "spew")
    assert time.monotonic() - t0 < 10
    first = snap.commands[0]
    assert first.truncated and first.bytes <= 1024 * 1024


def test_unknown_host_key(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inv = sshd.inventory(tmp_path, {"gpu-01": {"scenario": "healthy"}}, known_hosts=empty)
    [snap] = check_hosts(["gpu-01"], inv, deadline_s=10)
    port = sshd.ports["healthy"]
    assert snap.error is not None and "\n" not in snap.error
    assert "unknown host key (SHA256:" in snap.error
    assert f"ssh-keyscan -p {port} 127.0.0.1 >> {empty}" in snap.error
    assert not snap.commands and empty.read_text() == ""  # nothing run, nothing written


def test_changed_host_key(sshd: Sshd, tmp_path: Path) -> None:
    other = " ".join((sshd.root / "other_ed25519.pub").read_text().split()[:2])
    port = sshd.ports["healthy"]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {other}\n")
    inv = sshd.inventory(tmp_path, {"gpu-01": {"scenario": "healthy"}}, known_hosts=known)
    [snap] = check_hosts(["gpu-01"], inv, deadline_s=10)
    assert snap.error is not None and "host key CHANGED" in snap.error
    assert f"ssh-keygen -R '[127.0.0.1]:{port}'" in snap.error
    assert not snap.commands


def test_auth_failure(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "healthy", key=str(sshd.root / "other_ed25519"))
    assert snap.error is not None and snap.error.startswith("authentication failed")
    assert not snap.commands


def test_connection_refused(sshd: Sshd, tmp_path: Path) -> None:
    [port] = free_ports(1)
    inv = sshd.inventory(tmp_path, {"gpu-01": {"port": port}})
    [snap] = check_hosts(["gpu-01"], inv, deadline_s=5)
    assert snap.error == f"connection refused by [127.0.0.1]:{port}"


@pytest.mark.slow
def test_dead_host_does_not_hold_up_the_others(sshd: Sshd, tmp_path: Path) -> None:
    """A host that accepts TCP and never speaks costs its own deadline; the rest finish."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    stop = threading.Event()
    try:
        inv = sshd.inventory(tmp_path, {
            "dead": {"port": silent.getsockname()[1]},
            "gpu-01": {"scenario": "healthy"},
        })
        t0 = time.monotonic()
        dead, live = check_hosts(["dead", "gpu-01"], inv, deadline_s=3)
        assert time.monotonic() - t0 < 5
    finally:
        stop.set()
        silent.close()
    assert dead.error == "no SSH banner within 3 s"
    assert live.error is None and live.facts().gpu_name == "NVIDIA H200"


@pytest.mark.slow
def test_jump_host(sshd: Sshd, tmp_path: Path) -> None:
    """ProxyJump: the target is reached through a direct-tcpip channel of the jump host."""
    inv = sshd.inventory(tmp_path, {"bastion": {"scenario": "healthy"},
                                    "gpu-01": {"scenario": "mig", "jump": "bastion"}})
    [snap] = check_hosts(["gpu-01"], inv, deadline_s=10)
    assert snap.error is None and any(g.mig_instance for g in snap.facts().gpus)


def test_ssh_config_is_honoured(sshd: Sshd, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu-07\n  HostName 127.0.0.1\n  Port {sshd.ports['mig']}\n"
                   f"  User {sshd.user}\n  IdentityFile {sshd.key}\n")
    path = tmp_path / "hosts.yaml"
    path.write_text(f"known_hosts: {sshd.known_hosts}\nssh_config: {cfg}\n"
                    "hosts:\n  - name: gpu-07\n    allow_agent: false\n")
    from bot.collect.inventory import load_inventory

    [snap] = check_hosts(["gpu-07"], load_inventory(path), deadline_s=10)
    assert snap.error is None and snap.facts().gpu_name == "NVIDIA H200"


# -- the snapshot feeds the diagnosis ----------------------------------------------------------

def _diagnose(snap: Snapshot) -> Diagnosis:
    from bot.diagnose import diagnose
    from bot.kb.loader import load_kb

    return diagnose(snap.evidence(), load_kb())


def test_kv_failure_is_diagnosed_as_foreign_process(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "kv", logs={"source": "docker", "container": "vllm"})
    d = _diagnose(snap)
    assert d.problems and d.problems[0].id == "kv-cache-no-blocks"
    assert d.causes and d.causes[0].id == "foreign-process-holds-memory", d.causes
    assert d.facts.foreign_processes_gib == 20.0
    raise_util = [f for f in d.fixes if "--gpu-memory-utilization" in f.flags
                  and float(str(f.flags["--gpu-memory-utilization"])) > 0.75]
    assert not raise_util, "raising utilization cannot work while memhog holds 20 GiB"
    assert any("utilization" in w.id or "utilization" in w.title.lower()
               for w in d.withheld_fixes), d.withheld_fixes


@pytest.mark.slow
def test_driver_failure_is_diagnosed(sshd: Sshd, tmp_path: Path) -> None:
    snap = _one(sshd, tmp_path, "driver", logs={"source": "systemd", "unit": "vllm.service"})
    d = _diagnose(snap)
    assert d.problems and d.problems[0].id == "nvidia-driver-failure"


@pytest.mark.slow
def test_healthy_host_has_no_memory_problem(sshd: Sshd, tmp_path: Path) -> None:
    d = _diagnose(_one(sshd, tmp_path, "healthy"))
    assert not [p for p in d.problems if p.id.startswith(("kv-cache-no", "oom", "free-memory",
                                                          "max-model-len"))]
    assert d.facts.max_model_len == 32768 and d.facts.gpu_name == "NVIDIA H200"
