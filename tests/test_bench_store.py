"""bench/bench_store.py still runs against the schema as it is: a column the store gained
(a migration) must reach the bench's bulk load, or the 1M-event figures an issue asks for
cannot be taken. A small store per engine, every query timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.postgres import pg_admin_url

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_store.py"
QUERIES = 11


def bench(engine: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-B", str(BENCH), "--events", "600", "--groups", "40", "--reps", "2",
         "--engines", engine, "--pg-url", pg_admin_url(), "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def timed_queries(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip().startswith("history ")]


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgresql",
                                                         marks=pytest.mark.postgres)])
def test_bench_store_runs_on_each_engine(engine: str, pg_available: str | None,
                                         tmp_path: Path) -> None:
    if engine == "postgresql" and pg_available:
        pytest.skip(pg_available)
    out = bench(engine, tmp_path)
    assert "bulk write: 600 events" in out
    assert len(timed_queries(out)) == QUERIES
