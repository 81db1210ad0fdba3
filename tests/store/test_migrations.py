"""The schema exists only through migrations, and the migrations match the models."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from bot.config import Settings
from bot.store import repository
from bot.store.db import (
    HEAD,
    StoreUnavailable,
    alembic_config,
    current_revision,
    dispose_engines,
    get_engine,
    migrate,
)
from bot.store.tables import Base, include_object
from tests.fixtures.sqlite import SqliteWriter
from tests.store.conftest import make_diagnosis

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"incident_groups", "incident_events", "feedback", "command_audit"}


def _tables(url: str) -> set[str]:
    with get_engine(url).connect() as conn:
        return set(inspect(conn).get_table_names())


def _diff(url: str) -> list[object]:
    with get_engine(url).connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"include_object": include_object, "compare_type": True}
        )
        return list(compare_metadata(ctx, Base.metadata))


def test_head_constant_matches_the_scripts() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_current_head() == HEAD


def test_upgrade_downgrade_upgrade(db_url: str) -> None:
    engine = get_engine(db_url)
    assert migrate(engine, "head") == HEAD
    assert _tables(db_url) >= TABLES
    assert migrate(engine, "base", downgrade=True) is None
    assert not (TABLES & _tables(db_url))
    assert migrate(engine, "head") == HEAD
    assert _tables(db_url) >= TABLES


def test_models_and_migrations_agree(db_url: str) -> None:
    migrate(get_engine(db_url), "head")
    assert _diff(db_url) == []


def test_text_search_objects_are_created(db_url: str) -> None:
    engine = get_engine(db_url)
    migrate(engine, "head")
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
            assert {"incident_events_fts", "incident_events_fts_ai"} <= names
        else:
            cols = {c["name"] for c in inspect(conn).get_columns("incident_events")}
            assert "search_tsv" in cols
            idx = {i["name"] for i in inspect(conn).get_indexes("incident_events")}
            assert "ix_incident_events_search_tsv" in idx


def test_first_use_creates_the_schema(settings: Settings) -> None:
    """No set-up: the first call on an empty database migrates it."""
    assert repository.history(settings=settings) == []
    with get_engine(settings.database_url).connect() as conn:
        assert current_revision(conn) == HEAD


def test_a_schema_behind_is_migrated_by_the_upgrade_not_where_an_answer_waits(
        db_url: str, tmp_path: Path) -> None:
    """Recording and lookups run under the database deadline, which would cut a migration
    off: they leave an older schema as it is, the incident is spooled with the one line that
    says what to run, and the upgrade migrates and stores it."""
    migrate(get_engine(db_url), "0004")
    dispose_engines()
    settings = Settings(database_url=db_url, spool_dir=tmp_path / "spool")
    recorded = repository.record(make_diagnosis(), source="cli", settings=settings)
    assert recorded.spooled and recorded.warning == (
        f"incident not stored yet: store schema is behind (revision 0004, this inferbot needs "
        f"{HEAD}): run `inferbot db upgrade`, which stores it (spooled to "
        f"{recorded.spool_path})")
    with pytest.raises(StoreUnavailable, match=r"^store schema is behind \(revision 0004"):
        repository.history(settings=settings)
    with get_engine(db_url).connect() as conn:
        assert current_revision(conn) == "0004"
    assert repository.upgrade(settings) == HEAD
    assert [r.problem_id for r in repository.history(settings=settings)] == [
        "kv-cache-no-blocks"]
    assert not list((tmp_path / "spool").glob("*.json"))


def test_a_migration_waits_for_another_writer_s_lock(tmp_path: Path) -> None:
    """SQLite: a migration queues behind a writer (the busy timeout), as every write does,
    instead of failing with "database is locked" as soon as it tries to write."""
    db = tmp_path / "store.db"
    engine = get_engine(f"sqlite:///{db}")
    migrate(engine, "0002")
    writer = SqliteWriter(db)
    writer.hold()
    threading.Timer(1.0, writer.release).start()
    start = time.monotonic()
    assert migrate(engine, "head") == HEAD
    assert time.monotonic() - start >= 0.9


@pytest.mark.slow
def test_concurrent_first_use_migrates_once(settings: Settings) -> None:
    """Four processes open an empty database at the same moment: all succeed."""
    code = (
        "import sys\n"
        "from bot.config import Settings\n"
        "from bot.store import repository\n"
        "s = Settings(database_url=sys.argv[1], spool_dir=sys.argv[2])\n"
        "repository.open_store(s)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, settings.database_url, str(settings.spool_dir)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with get_engine(settings.database_url).connect() as conn:
        assert current_revision(conn) == HEAD
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    assert _diff(settings.database_url) == []


@pytest.mark.slow
def test_alembic_command_line_uses_the_settings_url(db_url: str) -> None:
    """Developers run plain `alembic` from the repository root; INFERBOT_DATABASE_URL is used."""
    env = {**os.environ, "INFERBOT_DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    alembic = Path(sys.executable).with_name("alembic")
    for args in (["upgrade", "head"], ["downgrade", "base"], ["upgrade", "head"]):
        subprocess.run([str(alembic), *args], cwd=ROOT, env=env, check=True, capture_output=True)
    with get_engine(db_url).connect() as conn:
        assert current_revision(conn) == HEAD
