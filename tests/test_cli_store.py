"""`inferbot diagnose` remembers: the answer first, then "seen N times", never a lost event."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "vllm-max-model-len.log"
# What the answer to EXAMPLE leads with: the problem as people read it (never its id)
TITLE = "max_model_len needs more KV cache than the GPU has left"


def run(tmp: Path, *args: str, db: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "INFERBOT_DATABASE_URL": db or f"sqlite:///{tmp / 'incidents.db'}",
           "INFERBOT_SPOOL_DIR": str(tmp / "spool")}
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


@pytest.mark.slow
def test_repeat_incident_is_counted_and_the_fix_remembered(tmp_path: Path) -> None:
    first = run(tmp_path, "diagnose", str(EXAMPLE), "--host", "gpu-07")
    assert first.returncode == 0
    lines = first.stdout.strip().splitlines()
    assert lines[0] == TITLE  # what broke first, then the history, then the command
    assert lines.index("  incident 1: first time seen") == lines.index("Run:") - 1
    assert run(tmp_path, "resolve", "1", "--fix", "--max-model-len 81664").returncode == 0
    again = run(tmp_path, "diagnose", str(EXAMPLE), "--host", "gpu-07")
    said = " ".join(ln.strip() for ln in again.stdout.splitlines())  # as wrapped
    assert "incident 2: seen 2 times in 1 day on gpu-07; last fixed just now by @" in said
    assert "with --max-model-len 81664" in said
    other_host = run(tmp_path, "diagnose", str(EXAMPLE), "--host", "gpu-08")
    assert "incident 3: first time seen" in other_host.stdout
    hist = json.loads(run(tmp_path, "history", "--host", "gpu-07", "--json").stdout)
    assert [r["incident_id"] for r in hist] == [2, 1]
    # one state, and who asked from where (a terminal: no channel, no permalink)
    assert [(r["status"], r["channel"], r["permalink"]) for r in hist] == [
        ("open", None, None), ("open", None, None)]
    assert hist[0]["user"] and hist[0]["resolution_fix"] == "--max-model-len 81664"
    text = run(tmp_path, "history", "--host", "gpu-07").stdout
    assert "open (back after a fix with --max-model-len 81664 by " in text
    assert " g1" not in text


@pytest.mark.slow
def test_json_carries_the_incident_id(tmp_path: Path) -> None:
    out = json.loads(run(tmp_path, "diagnose", str(EXAMPLE), "--json").stdout)
    assert out["incident_id"] == 1
    out = json.loads(run(tmp_path, "diagnose", str(EXAMPLE), "--json", "--no-store").stdout)
    assert out["incident_id"] is None


@pytest.mark.slow
def test_database_outage_still_answers_and_spools(tmp_path: Path) -> None:
    down = "postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2"
    r = run(tmp_path, "diagnose", str(EXAMPLE), db=down)
    assert r.returncode == 0
    assert "needs more KV cache than the GPU has left" in r.stdout.splitlines()[0]
    warning = r.stderr.strip().splitlines()
    assert len(warning) == 1 and "warning" in warning[0] and "Traceback" not in r.stderr
    assert list((tmp_path / "spool").glob("*.json"))
    # the next good connection drains the spool: the event is not lost, nor doubled
    later = run(tmp_path, "diagnose", str(EXAMPLE))
    assert "seen 2 times" in later.stdout
    assert not list((tmp_path / "spool").glob("*.json"))


@pytest.mark.slow
def test_history_bad_usage_is_one_line(tmp_path: Path) -> None:
    r = run(tmp_path, "history", "--since", "bogus")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_read_only_database_spools_and_history_still_reads(tmp_path: Path) -> None:
    assert run(tmp_path, "diagnose", str(EXAMPLE)).returncode == 0
    read_only = f"sqlite:///file:{tmp_path / 'incidents.db'}?mode=ro&uri=true"
    r = run(tmp_path, "diagnose", str(EXAMPLE), db=read_only)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == TITLE
    assert "spooled to" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    hist = run(tmp_path, "history", "--json", db=read_only)  # the spool waits; reading works
    assert hist.returncode == 0, hist.stderr
    assert [row["incident_id"] for row in json.loads(hist.stdout)] == [1]


@pytest.mark.slow
def test_no_database_and_no_spool_says_not_stored_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    env_spool = tmp_path / "a-file" / "spool"  # under a file: cannot be created, even by root
    read_only = f"sqlite:///file:{tmp_path / 'incidents.db'}?mode=ro&uri=true"
    assert run(tmp_path, "diagnose", str(EXAMPLE)).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INFERBOT_DATABASE_URL": read_only,
           "INFERBOT_SPOOL_DIR": str(env_spool)}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", str(EXAMPLE)],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == TITLE  # the answer went out
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("inferbot: error: incident not stored: database unavailable (")
    assert "the spool" in line and "cannot be written" in line


def run_full(tmp: Path, *args: str, code: str = "", file_size: int | None = None
             ) -> subprocess.CompletedProcess[str]:
    """The CLI as `run` starts it, with `code` run first in its process (after the imports)
    and, with `file_size`, no file it writes allowed past that many bytes (RLIMIT_FSIZE:
    writes past it fail with EFBIG, as they fail with ENOSPC on a full disk)."""
    import resource

    def limit() -> None:
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "INFERBOT_DATABASE_URL": f"sqlite:///{tmp / 'incidents.db'}",
           "INFERBOT_SPOOL_DIR": str(tmp / "spool")}
    program = f"import sys\n{code}\nfrom bot.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False, preexec_fn=limit)


# SQLite's own "database or disk is full" (SQLITE_FULL): no page may be added to the file.
DATABASE_FULL = """
from sqlalchemy import event
from sqlalchemy.pool import Pool
event.listen(Pool, "connect", lambda conn, _: conn.execute("PRAGMA max_page_count = 1"))
"""


@pytest.mark.slow
def test_a_full_database_spools_and_the_incident_is_written_once_there_is_room(
        tmp_path: Path) -> None:
    assert run(tmp_path, "diagnose", str(EXAMPLE)).returncode == 0
    r = run_full(tmp_path, "diagnose", str(EXAMPLE), code=DATABASE_FULL)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == TITLE
    [warning] = r.stderr.splitlines()
    assert warning.startswith("inferbot: warning: incident not stored yet: database "
                              "unavailable (OperationalError: database or disk is full); "
                              "spooled to ")
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    hist = run(tmp_path, "history", "--json")  # room again: the spooled incident is written
    assert [row["incident_id"] for row in json.loads(hist.stdout)] == [2, 1]
    assert not list((tmp_path / "spool").glob("*.json"))


@pytest.mark.slow
def test_a_full_disk_under_the_database_and_the_spool_says_not_stored_and_exits_1(
        tmp_path: Path) -> None:
    assert run(tmp_path, "diagnose", str(EXAMPLE)).returncode == 0
    # a spooled incident is about 16 KB: this much of it fits, the rest does not
    r = run_full(tmp_path, "diagnose", str(EXAMPLE), file_size=8192)
    assert r.returncode == 1 and r.stdout.splitlines()[0] == TITLE  # the answer went out
    [line] = r.stderr.splitlines()
    assert line.startswith("inferbot: error: incident not stored: database unavailable (")
    assert line.endswith(f"and the spool {tmp_path / 'spool'} cannot be written "
                         "(OSError: [Errno 27] File too large)")
    assert list((tmp_path / "spool").iterdir()) == []  # no half-written entry left
    hist = run(tmp_path, "history", "--json")
    assert hist.returncode == 0 and len(json.loads(hist.stdout)) == 1


def revision(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])


@pytest.mark.slow
def test_a_store_behind_is_left_to_db_upgrade_and_the_incident_kept(tmp_path: Path) -> None:
    """A migration can take minutes; recording's deadline would cut it off, so diagnose does
    not start one: it spools the incident and says what to run."""
    from bot.store.db import HEAD, dispose_engines, get_engine, migrate

    db = tmp_path / "incidents.db"
    migrate(get_engine(f"sqlite:///{db}"), "0004")
    dispose_engines()
    r = run(tmp_path, "diagnose", str(EXAMPLE))
    assert r.returncode == 0 and r.stdout.splitlines()[0] == TITLE
    [warning] = r.stderr.splitlines()
    assert warning.startswith(
        f"inferbot: warning: incident not stored yet: store schema is behind (revision 0004, "
        f"this inferbot needs {HEAD}): run `inferbot db upgrade`, which stores it (spooled to ")
    assert revision(db) == "0004" and len(list((tmp_path / "spool").glob("*.json"))) == 1
    hist = run(tmp_path, "history")
    assert hist.returncode == 1 and hist.stderr.splitlines() == [
        "inferbot: the incident database is unavailable: store schema is behind (revision "
        f"0004, this inferbot needs {HEAD}): run `inferbot db upgrade`"]
    up = run(tmp_path, "db", "upgrade")
    assert up.returncode == 0 and up.stdout == f"database at revision {HEAD}\n"
    assert not list((tmp_path / "spool").glob("*.json"))
    rows = json.loads(run(tmp_path, "history", "--json").stdout)
    assert [row["incident_id"] for row in rows] == [1]
