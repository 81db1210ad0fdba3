"""Fixtures for the incident-store tests: every store test runs on SQLite and on PostgreSQL.

PostgreSQL: a fresh database per test on the server named by INFERBOT_TEST_POSTGRES_URL
(default: the local server's `test` database, used only to create and drop the per-test
databases). If the server cannot be reached the PostgreSQL cases SKIP with the reason; CI
turns those skips into failures.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from bot.config import Settings
from bot.fingerprint import fingerprint
from bot.schema import CauseMatch, Diagnosis, Facts, Fix, ProblemMatch
from bot.store.db import dispose_engines

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pg_admin_url() -> str:
    return os.environ.get("INFERBOT_TEST_POSTGRES_URL") or DEFAULT_PG


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _pg_unreachable_reason() -> str | None:
    import psycopg

    try:
        with psycopg.connect(_libpq(pg_admin_url()), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return (
            f"PostgreSQL unreachable at {make_url(pg_admin_url()).render_as_string()} "
            f"(set INFERBOT_TEST_POSTGRES_URL): {type(exc).__name__}: {exc}"
        )
    return None


@pytest.fixture(scope="session")
def pg_available() -> str | None:
    return _pg_unreachable_reason()


@pytest.fixture
def pg_url(pg_available: str | None) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    if pg_available:
        pytest.skip(pg_available)
    import psycopg

    name = f"inferbot_test_{uuid.uuid4().hex[:12]}"
    admin = _libpq(pg_admin_url())
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield (
            make_url(pg_admin_url())
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        dispose_engines()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=ENGINES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database (no schema yet) on each engine."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        dispose_engines()
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=db_url, spool_dir=tmp_path / "spool")


def make_diagnosis(
    line: str = "INFO 11-30 06:03:16 [core.py:88] (VllmWorker pid=4242) ValueError: "
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    *,
    host: str | None = "gpu-1",
    problem: str | None = "kv-cache-no-blocks",
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    engine_version: str = "0.8.3",
    cause: str = "max-model-len-too-large",
) -> Diagnosis:
    """A Diagnosis as the core would produce it, fingerprint computed with the shared helper."""
    key = fingerprint(problem, line, host, model)
    problems = (
        [ProblemMatch(id=problem, title=f"{problem} title", confidence=0.9, evidence=[line])]
        if problem
        else []
    )
    return Diagnosis(
        kb_version="2026.11.1",
        fingerprint=key,
        host=host,
        problems=problems,
        causes=[CauseMatch(id=cause, title="max-model-len is too large", confidence=0.8)],
        facts=Facts(
            engine="vllm", engine_version=engine_version, model=model, max_model_len=131072
        ),
        fixes=[
            Fix(
                id="lower-max-model-len",
                title="Lower max-model-len",
                command=f"vllm serve {model} --max-model-len 77824",
                flags={"--max-model-len": 77824},
            )
        ],
        excerpt=line,
    )


def at(hour: int, day: int = 30) -> datetime:
    return datetime(2026, 11, day, hour, 0, tzinfo=UTC)
