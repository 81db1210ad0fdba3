"""`bot.structs.struct` behaves as `dataclasses.dataclass` with the same options: the same
repr text, equality, hash, immutability and pickling. Each shape is declared twice, once with
each decorator, and every observable is compared."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.structs import struct

Decorator = Callable[..., Any]


def shapes(deco: Decorator, prefix: str) -> dict[str, type[Any]]:
    """The class shapes the project uses, built with `deco`, kept at module level under
    `prefix` + their name so that pickle can find them."""

    @deco
    class Plain:
        name: str
        size: float = 1.5
        tags: list[str] = field(default_factory=list)

    @deco(frozen=True, slots=True)
    class Frozen:
        name: str
        hidden: int = field(default=0, repr=False)
        ignored: int = field(default=0, compare=False)

    @deco(frozen=True, slots=True, kw_only=True)
    class Base:
        id: str

    @deco(frozen=True, slots=True, kw_only=True)
    class Child(Base):
        weight: float = 0.5
        unhashed: int = field(default=0, hash=False)

    @deco(slots=True, kw_only=True)
    class Mutable:
        count: int = 0
        nested: Plain | None = None

    @deco(frozen=True, slots=True, eq=False)
    class Identity:
        value: int

    @deco(frozen=True)
    class OwnMethods:
        value: int

        def __repr__(self) -> str:
            return f"<{self.value}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, OwnMethods) and other.value % 10 == self.value % 10

        def __hash__(self) -> int:
            return self.value % 10

    @deco
    class Empty:
        pass

    made = {}
    for cls in (Plain, Frozen, Base, Child, Mutable, Identity, OwnMethods, Empty):
        made[cls.__name__] = cls
        cls.__qualname__ = cls.__name__ = prefix + cls.__name__
        globals()[cls.__name__] = cls
    return made


THEIRS = shapes(dataclass, "Theirs")
OURS = shapes(struct, "Ours")


def _pairs() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(class, kwargs of one instance, kwargs of a different one)."""
    return [
        ("Plain", {"name": "a", "tags": ["x"]}, {"name": "a", "tags": ["y"]}),
        ("Frozen", {"name": "a", "hidden": 1, "ignored": 2}, {"name": "b", "hidden": 1}),
        ("Base", {"id": "p"}, {"id": "q"}),
        ("Child", {"id": "p", "weight": 1.0, "unhashed": 3}, {"id": "p", "weight": 2.0}),
        ("Mutable", {"count": 1, "nested": None}, {"count": 2}),
        ("Identity", {"value": 1}, {"value": 2}),
        ("OwnMethods", {"value": 3}, {"value": 13}),
        ("Empty", {}, {}),
    ]


def _observe(cls: type[Any], one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Everything a user of the class could notice, with class names made comparable."""
    a, a2, b = cls(**one), cls(**one), cls(**other)
    named = cls.__name__.removeprefix("Ours").removeprefix("Theirs")
    seen: dict[str, Any] = {
        "repr": repr(a).replace(cls.__name__, named),
        "str": str(b).replace(cls.__name__, named),
        "eq_same_values": a == a2,
        "ne_same_values": a != a2,
        "eq_other_values": a == b,
        "eq_other_type": a == (one,),
        "fields": [f.name for f in dataclasses.fields(cls)],
        "hashable": cls.__hash__ is not None,
        "match_args": cls.__match_args__,
        "params_frozen": cls.__dataclass_params__.frozen,
    }
    if seen["hashable"]:
        seen["hash_same_values"] = hash(a) == hash(a2)
        seen["hash_other_values"] = hash(a) == hash(b)
    errors: list[str | None] = []
    for f in dataclasses.fields(cls)[:1]:
        changes: tuple[Callable[[Any, str], None], ...] = (
            lambda obj, name: setattr(obj, name, 7),
            lambda obj, name: delattr(obj, name),
        )
        for change in changes:
            try:
                change(cls(**one), f.name)
                errors.append(None)
            except dataclasses.FrozenInstanceError as exc:
                errors.append(str(exc))
    seen["frozen"] = errors
    restored = pickle.loads(pickle.dumps(b))
    seen["pickle_round_trip"] = repr(restored) == repr(b) and dataclasses.astuple(
        restored
    ) == dataclasses.astuple(b)
    seen["replace"] = repr(dataclasses.replace(a)) == repr(a)
    seen["deepcopy_equal"] = copy.deepcopy(a) == a
    return seen


@pytest.mark.parametrize(("name", "one", "other"), _pairs(), ids=[p[0] for p in _pairs()])
def test_struct_behaves_as_the_dataclass(
    name: str, one: dict[str, Any], other: dict[str, Any]
) -> None:
    theirs = _observe(THEIRS[name], one, other)
    ours = _observe(OURS[name], one, other)
    assert ours == theirs


def test_equality_is_only_between_instances_of_the_same_class() -> None:
    # A subclass instance with equal fields is not equal, as with dataclasses.
    assert OURS["Base"](id="p") != OURS["Child"](id="p")
    assert THEIRS["Base"](id="p") != THEIRS["Child"](id="p")


def test_recursive_repr_shows_an_ellipsis() -> None:
    made = {}
    for side, classes in (("ours", OURS), ("theirs", THEIRS)):
        inner = classes["Plain"](name="loop")
        inner.tags.append(inner)
        made[side] = repr(inner)
    assert made["ours"] == "OursPlain(name='loop', size=1.5, tags=[...])"
    assert made["theirs"] == "TheirsPlain(name='loop', size=1.5, tags=[...])"


def test_mutable_struct_is_unhashable() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(OURS["Mutable"]())


def test_bot_declares_its_dataclasses_with_struct() -> None:
    # `inferbot diagnose` imports most of bot/; a plain @dataclass there costs start-up time.
    bot = Path(__file__).resolve().parent.parent / "bot"
    plain = [
        f"{path.relative_to(bot.parent)}:{number}"
        for path in sorted(bot.rglob("*.py"))
        if path.name != "structs.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.lstrip().startswith(("@dataclass", "@dataclasses.dataclass"))
    ]
    assert plain == []
