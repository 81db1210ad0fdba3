"""`inferbot check` on a host whose own output is hostile: a container log with a canary
secret of every family and terminal control sequences on its error line, and GPU processes
whose names hold ", " and quotes (nvidia-smi does not quote them). The answer keeps every
process and its memory, and neither the report nor the database holds a secret or a control
character."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bot.cli import main
from tests.canaries import leaked
from tests.fixtures.sshd import Sshd
from tests.hostile import controls

pytestmark = pytest.mark.sshd


@pytest.mark.slow
def test_check_report_and_database_are_clean_and_keep_every_process(
        sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "check.db"
    monkeypatch.setenv("INFERBOT_DATABASE_URL", f"sqlite:///{db}")
    inv = sshd.inventory(tmp_path, {"gpu-07": {"scenario": "hostile",
                                              "logs": {"source": "docker", "container": "vllm"}}})
    assert inv.path is not None
    assert main(["check", "gpu-07", "--inventory", str(inv.path), "--json",
                 "--deadline", "20"]) == 0
    as_json = capsys.readouterr().out
    [host] = json.loads(as_json)["hosts"]
    assert host["error"] is None
    d = host["diagnosis"]
    assert d["problems"][0]["id"] == "kv-cache-no-blocks"
    procs = {(p["pid"], p["name"], p["used_mib"]) for p in d["facts"]["processes"]}
    assert procs == {(7001, 'python3 -c "a, b"', 19456.0),
                     (7002, '/root/tools/memhog --tag "x, y"', 1024.0)}
    assert d["facts"]["foreign_processes_gib"] == pytest.approx(20.0)
    assert d["causes"][0]["id"] == "foreign-process-holds-memory"
    assert "[REDACTED]" in d["excerpt"]

    assert main(["check", "gpu-07", "--inventory", str(inv.path), "--deadline", "20"]) == 0
    captured = capsys.readouterr()
    with sqlite3.connect(db) as conn:
        stored = "\n".join(conn.iterdump())
    for where, text in [("check --json", as_json), ("check", captured.out + captured.err),
                        ("the database", stored)]:
        assert leaked(text) == [], f"secrets in {where}"
        assert controls(text) == [], f"control characters in {where}"
