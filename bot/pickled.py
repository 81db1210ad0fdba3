"""Validated data kept between runs as a pickle in the user's cache directory.

The KB and the sizing catalogs are YAML validated by pydantic; doing that on every
`inferbot diagnose` would cost more than the diagnosis. What was built is kept under a key
that names its source (file sizes and times, or a content hash) and the fields of the classes
it holds: unpickling a frozen dataclass fills its fields by position, so a pickle written by a
version whose classes had other fields must never be read back. Sources are named by their
files' sizes and modification times, not their content: reading every file to hash it would
cost a cached start more than unpickling does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def files_key(files: Iterable[Path]) -> str:
    """A short digest of each file's path, size and modification time (to the nanosecond, so
    an edit changes it); a missing file counts as such."""
    h = hashlib.sha256()
    for path in files:
        try:
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        except OSError:
            h.update(f"{path}\0-\0".encode())
    return h.hexdigest()[:16]


def layout(classes: Iterable[type]) -> str:
    """A short digest of the classes' names and field names, in order."""
    text = ";".join(f"{c.__qualname__}:{','.join(f.name for f in dataclasses.fields(c))}"
                    for c in classes)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def kept(name: str, key: str, classes: Iterable[type], build: Callable[[], T],
         valid: Callable[[Any], bool]) -> T:
    """What `build()` returns, read from the pickle a run with the same `key` and the same
    `classes` wrote, if there is one that `valid` accepts; else built and written for the next
    run. A cache that cannot be read or written only makes this run slower."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}-{layout(classes)}"
    path = Path(base) / "inferbot" / f"{name}-{key}-{tag}.pickle"
    try:
        with path.open("rb") as fh:
            found = pickle.load(fh)
        if valid(found):
            return found  # type: ignore[no-any-return]
    except Exception:  # absent, stale or torn
        pass
    built = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as fh:
            pickle.dump(built, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)
    except OSError:
        pass
    return built
