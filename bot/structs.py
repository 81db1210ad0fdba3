"""`struct`: the project's dataclass decorator, cheaper to apply than `dataclasses.dataclass`.

It takes the dataclass options the project uses and behaves as the dataclass would, but its
`__repr__`, `__eq__` and (frozen) `__hash__` are three shared functions that read a per-class
tuple of field names, instead of methods compiled for each class. On Python 3.11 dataclasses
compiles every generated method with its own `exec`; for the ~90 classes `inferbot diagnose`
imports, repr and eq alone were about 30 ms of a 200 ms start-up whose budget is twice
`import pydantic, yaml`. `__init__` (and frozen's `__setattr__`) still come from dataclasses.

Same behaviour as the dataclass: the same repr text (fields with repr=True, recursion shown as
`...`), equality only between instances of exactly the same class over the compared fields,
hash over the hashed fields when frozen, `__hash__ = None` when mutable with eq, and a method
the class body defines is kept. `tests/test_records.py` holds them side by side.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")

# Per-class attribute names; dunder-style so that slots, pickling and pydantic ignore them.
_REPR = "__struct_repr__"
_KEY = "__struct_key__"
_HASH_KEY = "__struct_hash_key__"


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A C-speed getter of `names` as a tuple (attrgetter returns a bare value for one name)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in getattr(type(self), _REPR))
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = getattr(type(self), _KEY)
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(getattr(type(self), _HASH_KEY)(self))


def _finish(cls: type[Any], *, eq: bool, frozen: bool, own: dict[str, Any]) -> None:
    """Give the processed class the shared methods where the class body defines none."""
    fields = dataclasses.fields(cls)
    setattr(cls, _REPR, tuple(f.name for f in fields if f.repr))
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    if not eq:
        return
    setattr(cls, _KEY, _values(tuple(f.name for f in fields if f.compare)))
    if "__eq__" not in own:
        cls.__eq__ = _eq  # type: ignore[assignment]
    class_hash = own.get("__hash__", dataclasses.MISSING)
    if not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own)):
        return  # the class body chose its own hash
    if frozen:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        setattr(cls, _HASH_KEY, _values(hashed))
        cls.__hash__ = _hash  # type: ignore[assignment]
    else:
        cls.__hash__ = None  # type: ignore[assignment]


@overload
def struct(cls: type[_T], /) -> type[_T]: ...


@overload
def struct(
    *, frozen: bool = False, slots: bool = False, kw_only: bool = False, eq: bool = True
) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def struct(
    cls: type[_T] | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    kw_only: bool = False,
    eq: bool = True,
) -> type[_T] | Callable[[type[_T]], type[_T]]:
    """`@struct` or `@struct(frozen=..., slots=..., kw_only=..., eq=...)`, as `@dataclass`."""

    def wrap(target: type[_T]) -> type[_T]:
        own = dict(target.__dict__)
        made = dataclasses.dataclass(
            target, repr=False, eq=False, frozen=frozen, slots=slots, kw_only=kw_only
        )
        _finish(made, eq=eq, frozen=frozen, own=own)
        return made

    return wrap if cls is None else wrap(cls)
