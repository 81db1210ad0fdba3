"""Database down: the event is spooled, then written exactly once on the next connection."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select

from bot.config import Settings
from bot.store import history, record, record_command
from bot.store import spool as spool_files
from bot.store.db import get_engine
from bot.store.repository import _write_event, drain
from bot.store.tables import CommandAudit, IncidentEvent

from .conftest import make_diagnosis

# Nothing listens on port 1: connection refused, at once.
DOWN_PG = "postgresql+psycopg://postgres@127.0.0.1:1/inferbot"


def _down_settings(tmp_path: Path, spool_dir: Path) -> list[Settings]:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the database directory should be")
    return [
        Settings(database_url=DOWN_PG, spool_dir=spool_dir),
        Settings(database_url=f"sqlite:///{blocker / 'sub' / 'x.db'}", spool_dir=spool_dir),
    ]


def _events(settings: Settings) -> int:
    with get_engine(settings.database_url).connect() as conn:
        return int(conn.execute(select(func.count()).select_from(IncidentEvent)).scalar_one())


def test_outage_spools_then_drains_once(settings: Settings, tmp_path: Path) -> None:
    spooled = []
    for down in _down_settings(tmp_path, settings.spool_dir):
        r = record(make_diagnosis(), source="cli", settings=down)
        assert r.spooled and r.incident_id is None and r.spool_path
        assert r.warning and "spooled" in r.warning and "\n" not in r.warning
        spooled.append(Path(r.spool_path))
    assert all(p.exists() for p in spooled)
    assert (
        record_command(
            host="gpu-1",
            command_id="nvidia-smi",
            duration_s=0.1,
            exit_code=0,
            bytes_out=10,
            settings=_down_settings(tmp_path, settings.spool_dir)[0],
        )
        is None
    )
    assert len(spool_files.pending(settings.spool_dir)) == 3

    back = record(make_diagnosis(), source="cli", settings=settings)
    assert not back.spooled and back.drained == 3
    assert back.count == 3  # the two spooled events and this one: one group
    assert spool_files.pending(settings.spool_dir) == []
    assert _events(settings) == 3
    # draining again (another process, a later run) writes nothing twice
    assert drain(get_engine(settings.database_url), settings) == 0
    assert len(history(settings=settings)) == 3
    with get_engine(settings.database_url).connect() as conn:
        assert conn.execute(select(func.count()).select_from(CommandAudit)).scalar_one() == 1


def test_crash_after_commit_before_unlink_does_not_duplicate(settings: Settings) -> None:
    """The spooled file is still there although its event was written: drain skips it."""
    down = Settings(database_url=DOWN_PG, spool_dir=settings.spool_dir)
    r = record(make_diagnosis(), source="cli", settings=down)
    assert r.spool_path
    entry = spool_files.read(Path(r.spool_path))
    record(make_diagnosis(), source="cli", settings=settings)  # schema, drains
    assert _events(settings) == 2
    # simulate: the event made it to the database, the process died before unlinking
    spool_files.write(settings.spool_dir, {k: v for k, v in entry.items() if k != "spool_version"})
    first = _write_event(get_engine(settings.database_url), entry)
    assert first.already_recorded
    assert drain(get_engine(settings.database_url), settings) == 1
    assert _events(settings) == 2
    assert spool_files.pending(settings.spool_dir) == []


def test_unreadable_spool_entry_is_moved_aside(settings: Settings) -> None:
    settings.spool_dir.mkdir(parents=True)
    (settings.spool_dir / "0000-broken.json").write_text("{not json")
    (settings.spool_dir / "0001-alien.json").write_text(json.dumps({"kind": "x", "uid": "1"}))
    r = record(make_diagnosis(), source="cli", settings=settings)
    assert not r.spooled and r.drained == 0
    assert sorted(p.name for p in (settings.spool_dir / "bad").iterdir()) == [
        "0000-broken.json",
        "0001-alien.json",
    ]
    assert spool_files.pending(settings.spool_dir) == []


def test_spool_write_is_atomic_and_ordered(tmp_path: Path) -> None:
    a = spool_files.write(tmp_path, {"kind": "event", "uid": "b", "created_at": "2026-11-30T06:00"})
    b = spool_files.write(tmp_path, {"kind": "event", "uid": "a", "created_at": "2026-11-30T07:00"})
    assert spool_files.pending(tmp_path) == [a, b]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert spool_files.read(a)["spool_version"] == spool_files.SPOOL_VERSION
