"""Fixtures for the incident-store tests: every store test runs on SQLite and on PostgreSQL
(`pg_url`, tests/fixtures/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.config import Settings
from bot.fingerprint import fingerprint
from bot.schema import CauseMatch, Diagnosis, Facts, Fix, ProblemMatch
from bot.store.db import dispose_engines

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


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
