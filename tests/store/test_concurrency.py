"""Several processes writing at once lose no event and never duplicate a group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.config import Settings
from bot.store.db import get_engine
from bot.store.tables import IncidentEvent, IncidentGroup

WRITERS = 4
PER_WRITER = 50
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(settings: Settings) -> None:
    """4 processes x 50 events, all starting on an empty database (they race to migrate too)."""
    script = Path(__file__).with_name("writer_proc.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                settings.database_url,
                str(settings.spool_dir),
                str(n),
                str(PER_WRITER),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err

    G, E = IncidentGroup, IncidentEvent
    with get_engine(settings.database_url).connect() as conn:
        events = conn.execute(select(func.count()).select_from(E)).scalar_one()
        groups = conn.execute(select(G.host, G.problem_id, G.count).order_by(G.host)).all()
        per_group = dict(conn.execute(select(E.group_id, func.count()).group_by(E.group_id)).all())
        group_counts = dict(conn.execute(select(G.id, G.count)).all())
    assert events == WRITERS * PER_WRITER
    own = PER_WRITER // 5
    shared = (PER_WRITER - own) * WRITERS // 2
    assert sorted(groups) == sorted(
        [("shared", "kv-cache-no-blocks", shared), ("shared", "nccl-failure", shared)]
        + [(f"own-{n}", "kv-cache-no-blocks", own) for n in range(WRITERS)]
    )
    assert per_group == group_counts  # every group's count is exactly its events
    assert not list(settings.spool_dir.glob("*.json"))
