"""Which part of inferbot may import which (docs/architecture.md): the core (evidence, KB,
sizing, diagnose, render) imports nothing of the shell; each layer imports only its own and
those below; and outside bot/store, only the store's public package is imported, never its
tables, engines or spool. Every import counts, including those inside functions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

BOT = Path(__file__).resolve().parent.parent / "bot"

# Lowest first. A module may import modules of its own layer or of the layers below.
LAYERS: list[tuple[str, ...]] = [
    ("bot", "bot.lazyre", "bot.fmt", "bot.configfile", "bot.fingerprint", "bot.schema",
     "bot.pickled", "bot.structs"),
    ("bot.evidence",),
    ("bot.kb",),
    ("bot.sizing",),
    ("bot.diagnose", "bot.render"),
    ("bot.authoring", "bot.contract", "bot.config", "bot.errors", "bot.logs", "bot.metrics"),
    ("bot.store", "bot.collect"),
    ("bot.flows",),
    ("bot.slack", "bot.doctor"),
    ("bot.cli",),
]
# Parts of one layer that must not know each other.
APART = [("bot.store", "bot.collect")]
# Reads the spool and the migration head as they are, to report on them without opening
# the store (which would migrate and drain).
STORE_INTERNALS_ALLOWED = {"bot.doctor"}


def part(module: str) -> str:
    """The layer entry a module belongs to: its package below bot, or itself."""
    for entries in LAYERS:
        for entry in sorted(entries, key=len, reverse=True):
            if module == entry or (entry != "bot" and module.startswith(entry + ".")):
                return entry
    raise AssertionError(f"{module} is in no layer of LAYERS")


def layer(module: str) -> int:
    entry = part(module)
    return next(i for i, entries in enumerate(LAYERS) if entry in entries)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(BOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> Iterator[tuple[str, str, int]]:
    """(importing module, imported bot module, line) for every import in bot/."""
    for path in sorted(BOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue  # Alembic's scripts, run by the store
        name = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module]
                if node.module == "bot":  # `from bot import metrics`: the submodules
                    targets = [f"bot.{a.name}" for a in node.names if a.name != "__version__"]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                if target == "bot" or target.startswith("bot."):
                    yield name, target, node.lineno


ALL = list(imports())


def test_every_module_is_placed() -> None:
    for path in BOT.rglob("*.py"):
        if "migrations" not in path.parts:
            part(module_name(path))


def test_no_module_imports_upward() -> None:
    upward = [f"{m}:{line} imports {t}" for m, t, line in ALL if layer(t) > layer(m)]
    assert upward == []


@pytest.mark.parametrize(("a", "b"), APART)
def test_the_store_and_the_collector_do_not_know_each_other(a: str, b: str) -> None:
    crossing = [f"{m}:{line} imports {t}" for m, t, line in ALL
                if {part(m), part(t)} == {a, b}]
    assert crossing == []


def test_outside_the_store_only_its_public_package_is_imported() -> None:
    inside = [f"{m}:{line} imports {t}" for m, t, line in ALL
              if t.startswith("bot.store.") and part(m) != "bot.store"
              and m not in STORE_INTERNALS_ALLOWED]
    assert inside == []
