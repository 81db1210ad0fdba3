"""The KB's one error type, kept apart from the YAML reader so that code which only reports
errors (and the cached start of `inferbot diagnose`) never imports PyYAML."""

from __future__ import annotations

from pathlib import Path


class KBError(Exception):
    """One problem in one KB file, at one line. `str()` is the message users see."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {message}")
