"""A separate writer process for the concurrency test (run as a script, not collected).

argv: database_url spool_dir writer_no count. Writes `count` events alternating between two
incidents every writer shares, plus one incident of its own host; prints nothing on success.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bot.config import Settings
from bot.store import record
from tests.store.conftest import make_diagnosis

SHARED = [
    "INFO 11-30 06:{i:02d}:16 (pid={i}) No available memory for the cache blocks",
    "ERROR 11-30 07:{i:02d}:01 NCCL error: unhandled system error (pid={i})",
]


def main() -> None:
    url, spool_dir, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    settings = Settings(database_url=url, spool_dir=Path(spool_dir))
    for i in range(count):
        if i % 5 == 4:  # one in five: this writer's own host, its own group
            host = f"own-{writer}"
            line = SHARED[0].format(i=i % 60)
        else:
            host = "shared"
            line = SHARED[i % 2].format(i=i % 60)
        problem = "nccl-failure" if "NCCL" in line else "kv-cache-no-blocks"
        result = record(
            make_diagnosis(line, host=host, problem=problem),
            source="collector",
            settings=settings,
        )
        if result.spooled:
            raise SystemExit(f"writer {writer}: spooled: {result.warning}")


if __name__ == "__main__":
    main()
