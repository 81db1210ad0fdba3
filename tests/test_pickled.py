"""What is kept between runs: built once, read back, and never read into other classes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.pickled import files_key, kept


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    name: str
    size: int


@dataclasses.dataclass(frozen=True, slots=True)
class SpecWithUnit:  # the same class a later version extended
    name: str
    unit: str
    size: int


def _keeper(built: list[str]) -> Callable[[], Spec]:
    """A build that notes each time it runs."""
    def build() -> Spec:
        built.append("built")
        return Spec("llama", 8)
    return build


def test_built_once_then_read_back() -> None:
    built: list[str] = []
    first = kept("t", "k1", [Spec], _keeper(built), lambda f: isinstance(f, Spec))
    again = kept("t", "k1", [Spec], _keeper(built), lambda f: isinstance(f, Spec))
    assert first == again == Spec("llama", 8)
    assert built == ["built"]


def test_a_pickle_written_by_classes_with_other_fields_is_not_read() -> None:
    """Unpickling fills a frozen dataclass's fields by position: a pickle from a version
    whose class had other fields would load without error into the wrong fields."""
    built: list[str] = []
    kept("t", "k2", [Spec], _keeper(built), lambda f: True)
    kept("t", "k2", [SpecWithUnit], _keeper(built), lambda f: True)
    assert built == ["built", "built"]


def test_a_torn_or_foreign_pickle_is_rebuilt(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built: list[str] = []
    kept("t", "k3", [Spec], _keeper(built), lambda f: isinstance(f, Spec))
    (path,) = (tmp_path / "inferbot").glob("t-k3-*.pickle")
    path.write_bytes(b"\x80\x05not a pickle")
    again = kept("t", "k3", [Spec], _keeper(built), lambda f: isinstance(f, Spec))
    assert again == Spec("llama", 8)
    assert built == ["built", "built"]


def test_the_files_key_follows_an_edit_and_a_missing_file(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus: []\n")
    first = files_key([spec])
    assert files_key([spec]) == first
    spec.write_text("gpus: [h100]\n")
    edited = files_key([spec])
    assert edited != first
    spec.unlink()
    assert files_key([spec]) not in (first, edited)  # read as missing, no error
