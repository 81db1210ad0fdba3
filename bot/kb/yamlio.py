"""YAML that remembers where things came from, so every KB error can name a file and a line.

Files are composed into PyYAML nodes first (C parser when present); values are built from the
nodes, and a pydantic error location such as ('signatures', 2, 'pattern') is walked back down
the node tree to the line that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

try:  # the C loader is ten times faster; fall back quietly where libyaml is absent
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


from bot.kb.errors import KBError

M = TypeVar("M")
__all__ = ["Doc", "KBError", "load"]


class Doc:
    """A parsed YAML document: its value and its node tree."""

    def __init__(self, path: Path, node: yaml.Node | None) -> None:
        self.path = path
        self.node = node
        self.value: Any = _construct(node) if node is not None else None

    def line_of(self, loc: Sequence[int | str]) -> int | None:
        """1-based line of the value at `loc`, or of the deepest ancestor that exists."""
        node = self.node
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                nxt = None
                for key, val in node.value:
                    if key.value == part:
                        # an unknown key is best reported at the key itself
                        line = key.start_mark.line + 1
                        nxt = val
                        break
                if nxt is None:
                    return line
                node = nxt
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if part >= len(node.value):
                    return line
                node = node.value[part]
            else:
                return line
            line = node.start_mark.line + 1
        return line

    def validate(self, model: type[M], loc_prefix: Sequence[int | str] = ()) -> M:
        """`model` built from the document, or KBError at the line of the first mistake."""
        from pydantic import TypeAdapter, ValidationError

        try:
            return TypeAdapter(model).validate_python(self._at(loc_prefix))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = list(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            key, sep, rest = msg.partition(": ")
            if err["type"] == "value_error" and sep and key.isidentifier():
                # a check in the schema named the key it is about: point at that key
                where.append(key)
                msg = rest
            loc = (*loc_prefix, *where)
            field = ".".join(str(p) for p in where) or "(document)"
            if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
                msg = f"unknown key {err['loc'][-1]!r}"
            raise KBError(self.path, self.line_of(loc), f"{field}: {msg}") from None

    def _at(self, loc: Sequence[int | str]) -> Any:
        value = self.value
        for part in loc:
            value = value[part]
        return value


def _construct(node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key, val in node.value:
            k = _construct(key)
            if k in out:
                raise KBError("", key.start_mark.line + 1, f"duplicate key {k!r}")
            out[k] = _construct(val)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(v) for v in node.value]
    return _SCALARS.construct_object(node)


# Scalars are resolved by the safe constructor (tags already set by the composer); no
# arbitrary Python objects can come out of a KB file.
_SCALARS = yaml.SafeLoader("")


def load(path: Path) -> Doc:
    text = path.read_bytes()
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise KBError(path, mark.line + 1 if mark else None, f"invalid YAML: {exc.problem}"
                      ) from None
    try:
        return Doc(path, node)
    except KBError as exc:
        raise KBError(path, exc.line, exc.message) from None
