"""What may be contacted and what may be run: the inventory, host names, the catalog."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

import pytest

from bot.collect import catalog
from bot.collect.catalog import UnsafeValue
from bot.collect.execute import CommandResult, LocalExecutor
from bot.collect.inventory import HostRefused, InventoryError, check_name, load_inventory
from bot.collect.runner import check_hosts
from bot.collect.server import (
    Proc,
    Server,
    apply_docker_inspect,
    belongs,
    find_server,
    flags_to_facts,
    parse_ps,
)

HOSTILE = ["gpu1;id", "$(id)", "../x", "`id`", "gpu1 id", "-oProxyCommand=id", "", "a" * 70,
           "gpu1\nid", "gpu1|id", "gpu1&&id", ".hidden", "ｇｐｕ1"]


def _run1(cmd: catalog.Command) -> CommandResult:
    [result] = LocalExecutor().run([cmd], time.monotonic() + 10)
    return result


def _inventory(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(f"ssh_config: {tmp_path / 'none'}\n{body}")
    return path


@pytest.fixture
def inv_path(tmp_path: Path) -> Path:
    return _inventory(tmp_path, "hosts:\n  - name: gpu1\n    address: 127.0.0.1\n    port: 1\n")


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_refused_before_any_connection(
        name: str, inv_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.collect.ssh

    def no_connect(*_a: object, **_k: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(bot.collect.ssh.SshSession, "connect", no_connect)
    [snap] = check_hosts([name], load_inventory(inv_path), deadline_s=5)
    assert snap.error is not None and snap.error.startswith("refused ")
    assert "\n" not in snap.error and not snap.commands


def test_host_not_in_inventory(inv_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.collect.ssh

    monkeypatch.setattr(bot.collect.ssh.SshSession, "connect", None)
    [snap] = check_hosts(["gpu2"], load_inventory(inv_path), deadline_s=5)
    assert snap.error == f"refused 'gpu2': not in {inv_path} (add it there to allow checks)"
    with pytest.raises(HostRefused):
        load_inventory(inv_path).resolve("GPU1")  # exact match only


def test_check_name_accepts_ordinary_names() -> None:
    for name in ("gpu-07", "gpu_07", "node7.example.com", "H100x8"):
        assert check_name(name) == name


@pytest.mark.parametrize(("body", "where"), [
    ("hosts:\n  - name: gpu1\n    adress: x\n", ":4: hosts.0.adress: unknown key"),
    ("hosts:\n  - name: 'gpu1;id'\n", ":3: hosts.0.name"),
    ("hosts:\n  - name: gpu1\n    logs: {source: docker}\n", "needs logs.container"),
    ("hosts:\n  - name: gpu1\n    logs: {source: file, path: ../x}\n", "absolute path"),
    ("hosts:\n  - name: gpu1\n  - name: gpu1\n", "listed twice"),
])
def test_inventory_errors_name_file_and_line(tmp_path: Path, body: str, where: str) -> None:
    path = _inventory(tmp_path, body)
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert str(exc.value).startswith(str(path)) and where in str(exc.value)


def test_ssh_config_and_jump(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-07\n  HostName 10.0.0.7\n  User ops\n  Port 2222\n"
                   "  IdentityFile ~/.ssh/fleet\n  ProxyJump bastion\n"
                   "Host bastion\n  HostName 10.0.0.1\n  User jump\n")
    path = tmp_path / "hosts.yaml"
    path.write_text(f"ssh_config: {cfg}\nknown_hosts: /etc/kh\nhosts:\n  - name: gpu-07\n")
    t = load_inventory(path).resolve("gpu-07")
    assert (t.endpoint.address, t.endpoint.port, t.endpoint.user) == ("10.0.0.7", 2222, "ops")
    assert t.endpoint.key_files == (str(Path.home() / ".ssh/fleet"),)
    assert t.endpoint.known_hosts_name == "[10.0.0.7]:2222"
    assert t.jump is not None and (t.jump.address, t.jump.user) == ("10.0.0.1", "jump")


def test_inventory_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("INFERBOT_INVENTORY", str(tmp_path / "none.yaml"))
    with pytest.raises(InventoryError, match=r"no inventory at .*none\.yaml"):
        load_inventory()


# -- the catalog ---------------------------------------------------------------------------

def test_every_line_is_bounded_in_time_and_size() -> None:
    cmds = [catalog.gpu_query(), catalog.gpu_apps(), catalog.gpu_table(), catalog.processes(),
            catalog.cmdline(42), catalog.docker_inspect("vllm"),
            catalog.systemd_show("vllm.service"), catalog.driver_module(),
            catalog.engine_version("/opt/venv/bin/python3"),
            catalog.logs_docker("vllm"), catalog.logs_journal("vllm.service"),
            catalog.logs_file("/var/log/vllm.log"), catalog.logs_of_pid(42),
            catalog.model_config_hf("Qwen/Qwen2.5-7B-Instruct"),
            catalog.model_config_path("/models/qwen")]
    for c in cmds:
        line = c.line()
        assert line.startswith(f"( timeout -k 2 {c.timeout_s} ")
        assert line.endswith(f" | head -c {c.max_bytes}")


@pytest.mark.parametrize(("build", "value"), [
    (catalog.docker_inspect, "vllm; rm -rf /"), (catalog.docker_inspect, "$(id)"),
    (catalog.logs_journal, "a b"), (catalog.logs_file, "/var/log/../../etc/shadow"),
    (catalog.logs_file, "relative.log"), (catalog.model_config_hf, "../../etc"),
    (catalog.model_config_path, "/models/$(id)"),
])
def test_unsafe_values_never_build_a_command(build: object, value: str) -> None:
    with pytest.raises(UnsafeValue):
        build(value)  # type: ignore[operator]


def test_model_config_from_the_hf_cache(tmp_path: Path) -> None:
    """The script gets its values as "$1"/"$2": refs/main's snapshot, else the newest one."""
    folder = tmp_path / "hub" / "models--org--m"
    (folder / "snapshots" / "abc").mkdir(parents=True)
    (folder / "snapshots" / "abc" / "config.json").write_text('{"model_type": "llama"}')
    cmd = catalog.model_config_hf("org/m", str(tmp_path / "hub"))
    assert _run1(cmd).output == '{"model_type": "llama"}'
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("def")
    (folder / "snapshots" / "def").mkdir()
    (folder / "snapshots" / "def" / "config.json").write_text('{"model_type": "qwen2"}')
    assert "qwen2" in _run1(cmd).output
    missing = _run1(catalog.model_config_hf("org/x", str(tmp_path / "hub")))
    assert missing.rc == 1 and "no config.json under" in missing.output


def test_exit_status_survives_the_pipe_and_the_cap() -> None:
    r = _run1(catalog.Command("t", ("sh", "-c", "echo out; echo err >&2; exit 3")))
    assert (r.rc, r.output) == (3, "out\nerr\n")  # merged in order, rc from the marker
    assert "rc=" not in r.output
    big = catalog.Command("t", ("sh", "-c", "yes | head -c 5000000"), max_bytes=1000)
    r = _run1(big)
    assert r.truncated and len(r.output) == 1000


@pytest.mark.slow
def test_remote_timeout_kills_the_command() -> None:
    t0 = time.monotonic()
    r = _run1(catalog.Command("t", ("sleep", "30"), timeout_s=1))
    assert time.monotonic() - t0 < 5
    assert r.timed_out and r.error == "t timed out after 1 s"


def test_cmdline_keeps_arguments_and_hides_secrets() -> None:
    argv = ["sh", "-c", "sleep 30; :", "vllm", "--api-key", "s3cr3tKey9", "two words"]
    proc = subprocess.Popen(argv)
    try:
        r = _run1(catalog.cmdline(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert shlex.split(r.output) == [*argv[:5], "[REDACTED]", "two words"]


# -- the server and its processes --------------------------------------------------------

CID = "4f1c2a7b9d3e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef"


@pytest.mark.parametrize(("cgroup", "container", "unit"), [
    (f"12:memory:/docker/{CID}", CID, None),
    (f"0::/system.slice/docker-{CID}.scope", CID, None),
    (f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{CID}.scope", CID, None),
    ("0::/system.slice/vllm.service", None, "vllm.service"),
    ("-", None, None),
])
def test_pid_to_container_from_cgroup(cgroup: str, container: str | None, unit: str | None
                                      ) -> None:
    p = Proc(pid=1, ppid=0, cgroup=cgroup, args="x")
    assert (p.container, p.unit) == (container, unit)


def test_v1_workers_are_walked_to_their_server() -> None:
    procs = parse_ps(
        "  10   1 0::/user.slice /usr/bin/python3 /venv/bin/vllm serve m --max-model-len 8192\n"
        "  11  10 0::/user.slice VLLM::EngineCore\n"
        "  12  11 0::/user.slice VLLM::Worker_TP0\n"
        "  20   1 0::/user.slice python train.py\n"
        "  30   1 0::/user.slice VLLM::EngineCore\n")  # an orphan from a dead server
    server = find_server(procs, [12, 20, 30])
    assert server is not None and server.pid == 10
    assert [belongs(server, procs, pid) for pid in (12, 20, 30)] == [True, False, False]
    facts = flags_to_facts(server)
    assert facts["model"] == "m" and facts["max_model_len"] == 8192


def test_api_server_flags_and_switches() -> None:
    s = Server(engine="vllm", argv=[
        "python3", "-m", "vllm.entrypoints.openai.api_server", "--model=org/m", "-tp", "2",
        "--gpu_memory_utilization", "0.85", "--enforce-eager", "--kv-cache-dtype", "fp8",
        "--max-model-len", "32768"])
    f = flags_to_facts(s)
    assert (f["model"], f["tensor_parallel_size"], f["gpu_memory_utilization"]) == (
        "org/m", 2, 0.85)
    assert f["enforce_eager"] is True and f["kv_cache_dtype"] == "fp8"
    assert f["max_model_len"] == 32768


def test_a_batch_keeps_each_commands_output_status_and_bounds() -> None:
    cmds = [catalog.Command("a", ("sh", "-c", "printf 'no newline'; exit 4")),
            catalog.Command("b", ("sh", "-c", "yes | head -c 5000"), max_bytes=100),
            catalog.Command("c", ("sh", "-c", "echo inferbot-0123:0:9; echo done"))]
    a, b, c = LocalExecutor().run(cmds, time.monotonic() + 10)
    assert (a.rc, a.output) == (4, "no newline")
    assert b.truncated and len(b.output) == 100
    assert (c.rc, c.output) == (0, "inferbot-0123:0:9\ndone\n")  # not the batch's token


@pytest.mark.slow
def test_a_batch_cut_by_the_deadline_says_what_did_not_run() -> None:
    cmds = [catalog.Command("slow", ("sleep", "5")), catalog.Command("next", ("true",))]
    t0 = time.monotonic()
    slow, nxt = LocalExecutor().run(cmds, time.monotonic() + 1)
    assert time.monotonic() - t0 < 3
    assert slow.timed_out and slow.error == "slow did not finish before the deadline"
    assert nxt.rc is None and nxt.error == "next: not run, the host's deadline was reached"


def test_the_inventorys_container_decides_which_server_is_diagnosed() -> None:
    """Two servers on one host: ps finds a host process first; the inventory names the
    container, and docker inspect's server (its own host PID) replaces the ps guess."""
    import json

    procs = parse_ps(f"  10   1 0::/user.slice vllm serve other/model\n"
                     f"  20   1 0::/system.slice/docker-{CID}.scope vllm serve org/m\n")
    guess = find_server(procs, [10, 20])
    assert guess is not None and guess.pid == 10
    inspect = json.dumps([{"Id": CID, "State": {"Pid": 20}, "Config": {
        "Image": "vllm/vllm-openai:v0.9.2", "Entrypoint": ["vllm", "serve"], "Cmd": ["org/m"]},
        "Mounts": [{"Source": "/data/hf", "Destination": "/root/.cache/huggingface"}]}])
    server = apply_docker_inspect(guess, inspect)
    assert server is not None and (server.pid, server.container) == (20, CID)
    assert server.hf_hub_dir == "/data/hf/hub"
    assert flags_to_facts(server)["engine_version"] == "0.9.2"
    assert [belongs(server, procs, pid) for pid in (10, 20)] == [False, True]
