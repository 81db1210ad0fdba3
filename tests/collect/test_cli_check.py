"""`inferbot check`: parallel collection, per-host report, exit codes, one audit row per command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli import main
from tests.fixtures.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.mark.slow
def test_check_reports_each_host_and_audits_every_command(
        sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = sshd.inventory(tmp_path, {"gpu-01": {"scenario": "mig"}})
    assert inv.path is not None
    rc = main(["check", "gpu-01", "$(id)", "--inventory", str(inv.path), "--json",
               "--deadline", "15"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2  # a refused name is bad input; the good host is still reported
    good, bad = out["hosts"]
    assert good["host"] == "gpu-01" and good["error"] is None
    assert {c["id"] for c in good["commands"]} >= {"nvidia-smi-query-gpu", "ps"}
    assert all("output" not in c for c in good["commands"])
    assert good["diagnosis"]["facts"]["gpu_name"] == "NVIDIA H200"
    assert bad == {"host": "$(id)", "method": "ssh", "duration_s": 0.0, "unread": [],
                   "error": "refused '$(id)': not a valid host name (letters, digits, . _ -)",
                   "commands": [], "diagnosis": None}

    from sqlalchemy import select

    from bot.store.repository import open_store
    from bot.store.tables import CommandAudit

    with open_store().connect() as conn:
        rows = conn.execute(select(CommandAudit.host, CommandAudit.command_id,
                                   CommandAudit.run_id, CommandAudit.who)).all()
    assert sorted(r.command_id for r in rows) == sorted(c["id"] for c in good["commands"])
    assert {r.host for r in rows} == {"gpu-01"}
    assert len({r.run_id for r in rows}) == 1 and rows[0].who.startswith("cli:")


def test_check_without_inventory_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "gpu-01", "--inventory", str(tmp_path / "missing.yaml")])
    assert rc == 2
    assert capsys.readouterr().err.startswith("inferbot: no inventory at ")


@pytest.mark.slow
def test_chat_check_respects_the_hosts_channels_and_the_terminal_has_none(
        sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.flows import Asker, check_hosts
    from bot.kb.loader import load_kb

    inv = sshd.inventory(tmp_path, {"gpu-01": {"scenario": "mig", "channels": ["C-GPU"]}})

    def chat(channel: str, host: str = "gpu-01") -> str | None:
        asker = Asker(origin="slack", user="U1", channel=channel, thread="1.2")
        [result] = check_hosts([host], asker, load_kb, inventory=inv, store=False)
        if result.answer is not None:
            assert result.answer.diagnosis.facts.gpu_name == "NVIDIA H200"
            assert result.answer.diagnosis.host == "gpu-01"
        return result.snapshot.error

    assert "not allowed from this channel" in (chat("C-OTHER") or "")
    assert "not from chat" in (chat("C-GPU", "localhost") or "")
    assert chat("C-GPU") is None
    assert inv.path is not None
    assert main(["check", "gpu-01", "--inventory", str(inv.path), "--no-store"]) == 0
    assert "NVIDIA H200" in capsys.readouterr().out


def test_hostile_names_are_refused_even_without_an_inventory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "gpu1;id", "../x", "--inventory", str(tmp_path / "missing.yaml")])
    captured = capsys.readouterr()
    assert rc == 2
    assert "refused 'gpu1;id': not a valid host name" in captured.out
    assert "refused '../x': not a valid host name" in captured.out
    # and, as every bad usage, one line each on stderr
    assert captured.err.splitlines() == [
        "inferbot: refused 'gpu1;id': not a valid host name (letters, digits, . _ -)",
        "inferbot: refused '../x': not a valid host name (letters, digits, . _ -)"]


@pytest.mark.slow
def test_a_host_that_accepts_and_never_speaks_is_one_line(
        sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-07\n  ConnectTimeout 2\n")
    try:
        inv = sshd.inventory(tmp_path, {"gpu-07": {"port": silent.getsockname()[1]}},
                             ssh_config=cfg)
        assert inv.path is not None
        rc = main(["check", "gpu-07", "--inventory", str(inv.path), "--no-store"])
    finally:
        silent.close()
    out = capsys.readouterr()
    assert rc == 1
    assert out.err == "inferbot: gpu-07: no SSH banner within 2 s\n"
    assert "Traceback" not in out.out + out.err
