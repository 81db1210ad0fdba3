"""`inferbot diagnose` stays light: with the KB cached, none of the heavy libraries load.

The start-up target (bench/bench_startup.py: under 2x `import pydantic, yaml`) holds only while
Slack, paramiko, SQLAlchemy, matplotlib, pydantic and PyYAML stay off this path; this test
names the module that crept in, rather than a benchmark drifting slower.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("slack_bolt", "slack_sdk", "paramiko", "sqlalchemy", "matplotlib", "pydantic",
         "pydantic_settings", "yaml", "alembic", "psycopg", "pynvml")

PROBE = """
import contextlib, io, sys
from bot.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["diagnose", sys.argv[1], "--no-store"])
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


@pytest.mark.slow
def test_a_cached_diagnose_imports_nothing_heavy() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    example = str(ROOT / "examples" / "vllm-max-model-len.log")
    runs = [subprocess.run([sys.executable, "-c", PROBE, example], capture_output=True,
                           text=True, env=env, timeout=120, check=True) for _ in range(2)]
    loaded = set(runs[1].stdout.split())  # the second run finds the KB cache the first wrote
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
