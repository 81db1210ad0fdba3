"""The spool: rows waiting for the database, one JSON file each.

When the database is unreachable the diagnosis has already been printed; the event must still
not be lost. The row is written here (temp file, fsync, atomic rename, so a crash never leaves a
half file that looks complete) and written to the database by the next process that connects.
Each row carries its idempotency key (event_uid / audit_uid), so a crash between the database
commit and the unlink makes the next drain find the row already there, never write it twice.
A drain lock keeps two processes from draining the same files at once.

No SQLAlchemy here: this is plain files.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPOOL_VERSION = 1
_SUFFIX = ".json"
BAD_DIR = "bad"


def write(spool_dir: Path, entry: dict[str, Any]) -> Path:
    """Atomically write one entry; the name sorts by creation time, then by key."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    name = f"{entry['created_at'].replace(':', '').replace('-', '')}-{entry['uid']}{_SUFFIX}"
    final = spool_dir / name
    fd, tmp = tempfile.mkstemp(dir=spool_dir, prefix=".tmp-", suffix=_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"spool_version": SPOOL_VERSION, **entry}, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(spool_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return final


def pending(spool_dir: Path) -> list[Path]:
    """Spooled entries, oldest first (temp files of writers still in progress are skipped)."""
    try:
        names = sorted(
            p for p in spool_dir.iterdir() if p.suffix == _SUFFIX and not p.name.startswith(".")
        )
    except (FileNotFoundError, NotADirectoryError):  # nothing was ever spooled there
        return []
    return names


def read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "kind" not in data or "uid" not in data:
        raise ValueError(f"{path.name}: not a spool entry")
    return data


def quarantine(path: Path) -> Path:
    """Move an entry the database refuses (not an outage) aside, so it cannot block the rest."""
    bad = path.parent / BAD_DIR
    bad.mkdir(exist_ok=True)
    target = bad / path.name
    os.replace(path, target)
    return target


@contextlib.contextmanager
def drain_lock(spool_dir: Path) -> Iterator[bool]:
    """Yields True if this process may drain now, False if another process is draining."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    spool_dir.mkdir(parents=True, exist_ok=True)
    with open(spool_dir / ".drain.lock", "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
