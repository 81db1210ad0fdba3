"""One reading of the numbers logs print, shared by every extractor.

The same quantity is printed many ways ("661,808", "24.0", "22.5", "-1.05", "160MiB",
"448.00 KiB", "0 bytes"). Parsing them in one place keeps every extractor agreeing on units and
on what "unknown" looks like. vLLM, SGLang and TGI print "GB" for values computed with 2**30, so
decimal labels are read as binary ones, exactly as the tools meant them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from typing import Any, Literal

from bot.evidence.base import FactSink
from bot.schema import Facts

# A number as logs print it: optional sign, thousands separators, decimals. No nested repeats.
NUM = r"-?\d{1,15}(?:,\d\d\d){0,4}(?:\.\d{1,8})?"
UNIT = r"(?:bytes|[KMGT]i?B)"
UNIT_SUFFIX = "__unit"

_TO_GIB = {
    "bytes": 1 / 2**30,
    "KiB": 1 / 2**20, "KB": 1 / 2**20,
    "MiB": 1 / 2**10, "MB": 1 / 2**10,
    "GiB": 1.0, "GB": 1.0,
    "TiB": 2.0**10, "TB": 2.0**10,
}

Kind = Literal["int", "float", "bool", "str"]


def num(name: str) -> str:
    """A named group holding a number; the group name is the Facts field it fills."""
    return f"(?P<{name}>{NUM})"


def qty(name: str) -> str:
    """A number and its unit (optional space between, as in "160MiB" and "160.00 MiB")."""
    return f"(?P<{name}>{NUM}) ?(?P<{name}{UNIT_SUFFIX}>{UNIT})"


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip().replace(",", ""))
    except ValueError:
        return None


def to_int(text: str | None) -> int | None:
    value = to_float(text)
    if value is None or value != int(value):
        return None
    return int(value)


def to_gib(value: str | None, unit: str | None) -> float | None:
    number = to_float(value)
    if number is None:
        return None
    return number * _TO_GIB.get(unit or "GiB", 1.0)


def to_mib(text: str | None) -> float | None:
    """A memory cell as nvidia-smi prints it ("49140 MiB", "49140", "[N/A]" -> None)."""
    if text is None:
        return None
    cell = text.strip()
    for unit in ("MiB", "GiB"):
        if cell.endswith(unit):
            number = to_float(cell[: -len(unit)])
            return None if number is None else number * (1024.0 if unit == "GiB" else 1.0)
    return to_float(cell)


def to_bool(text: str | None) -> bool | None:
    if text is None:
        return None
    word = text.strip().strip("'\"").lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    return None


def _kind_of(annotation: str) -> Kind:
    # Facts uses postponed annotations: the type is the source text, e.g. "int | None".
    words = set(annotation.replace("|", " ").split())
    if "bool" in words:
        return "bool"
    if "int" in words:
        return "int"
    return "float" if "float" in words else "str"


KINDS: dict[str, Kind] = {f.name: _kind_of(str(f.type)) for f in dataclasses.fields(Facts)}


def convert(name: str, raw: str, unit: str | None = None) -> Any:
    """`raw` read as the type of fact `name` (GiB facts take the unit into account)."""
    kind = KINDS[name]
    if kind == "int":
        return to_int(raw)
    if kind == "float":
        return to_gib(raw, unit) if unit else to_float(raw)
    if kind == "bool":
        return to_bool(raw)
    return raw.strip()


def put(sink: FactSink, match: re.Match[str], line_no: int, default: bool = False,
        weak: Collection[str] = ()) -> None:
    """Write every named group of `match` into the fact of the same name; `default` (all) or
    `weak` (those named) only fill facts nothing else has set."""
    groups = match.groupdict()
    for name, raw in groups.items():
        if raw is None or name.endswith(UNIT_SUFFIX):
            continue
        value = convert(name, raw, groups.get(name + UNIT_SUFFIX))
        if default or name in weak:
            sink.set_default(name, value, line_no)
        else:
            sink.set(name, value, line_no)


def is_unknown(cell: str) -> bool:
    """nvidia-smi's ways of saying "no value": never read as 0."""
    cell = cell.strip()
    return not cell or cell.startswith("[") or cell in ("N/A", "-", "ERR!")
