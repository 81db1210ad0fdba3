"""The knowledge base's file formats, as pydantic models.

Problems are symptoms (what the log shows); causes are why it happened (what the facts show);
fixes hang off causes. Everything here is data: patterns are regular expressions compiled with
linear-time guards (see `bot.kb.safety`), checks and withhold conditions are names looked up in
code registries, and fix commands are `{name}` templates filled from computed values.
"""

from __future__ import annotations

import re
import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.kb.safety import UnsafePattern, anchor_variants, check_linear, derive_anchor

KEBAB = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
SNAKE = r"^[a-z][a-z0-9_]*$"


class KBModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"bad regex {value!r}: {exc}") from exc
    return value


class Context(KBModel):
    """Lines that must (or must not) appear shortly before a signature line for it to count.

    Tracebacks print the frames above the error, so "CUDA out of memory" after a `load_model`
    frame is a weight-loading OOM and after `capture_model` a CUDA-graph OOM.
    """

    any: list[str] = Field(default_factory=list, description="at least one must appear")
    none: list[str] = Field(default_factory=list, description="none may appear")
    within: int = Field(default=80, ge=0, le=2000, description="lines before the signature")

    @field_validator("any", "none")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for v in value:
            _check_regex(v)
            try:
                check_linear(v)
            except UnsafePattern as exc:
                raise ValueError(str(exc)) from None
            if derive_anchor(v) is None:
                raise ValueError(f"context pattern {v!r} needs a literal of 3+ characters")
        return value


class Signature(KBModel):
    id: str = Field(pattern=KEBAB)
    pattern: str
    kind: Literal["error", "warning", "info"] = "error"
    weight: float = Field(default=0.9, gt=0.0, le=1.0)
    engine: Literal["vllm", "sglang", "tgi", "torch", "nccl", "nvidia", "any"] = "any"
    ignore_case: bool = False
    # Literals, one of which every matching line contains; derived from the pattern when
    # omitted. The scanner looks for these before it runs any regex, so they must be exact.
    anchors: list[str] = Field(default_factory=list)
    context: Context | None = None
    # A fallback hit is dropped when the same line also matched a non-fallback signature.
    fallback: bool = False
    note: str = ""

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        _check_regex(value)
        try:
            check_linear(value)
        except UnsafePattern as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("anchors")
    @classmethod
    def _anchors(cls, value: list[str]) -> list[str]:
        for a in value:
            if len(a) < 3 or set(a) & set("<>&\r\n"):
                raise ValueError(f"anchor {a!r}: at least 3 characters, no < > & or newlines")
        return value

    def effective_anchors(self) -> tuple[str, ...]:
        if self.anchors:
            base = self.anchors
        else:
            derived = derive_anchor(self.pattern)
            if derived is None:
                raise ValueError(f"signature {self.id}: no literal anchor in the pattern; "
                                 "list `anchors:`")
            base = [derived]
        out: list[str] = []
        for a in base:
            out.extend(anchor_variants(a, self.ignore_case))
        return tuple(dict.fromkeys(out))


class Diagnostic(KBModel):
    title: str
    command: str | None = None
    explain: str | None = None


class FAQ(KBModel):
    q: str
    a: str


class Problem(KBModel):
    id: str = Field(pattern=KEBAB)
    revision: int = Field(ge=1)
    title: str
    short_answer: str
    memory_problem: bool = Field(
        description="True when the symptom is about GPU memory; gates the sizing arithmetic"
    )
    signatures: list[Signature] = Field(min_length=1)
    causes: list[str] = Field(default_factory=list, description="candidate cause ids")
    confirm: list[str] = Field(default_factory=list)
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    prevention: list[str] = Field(default_factory=list)
    architecture: str = ""
    faq: list[FAQ] = Field(default_factory=list)
    related: list[str] = Field(default_factory=list)
    affects: str = ""


def template_fields(template: str) -> list[str]:
    """Placeholder names in a fix template; only plain `{name}` / `{name:spec}` are allowed."""
    names = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        if not re.fullmatch(SNAKE, field):
            raise ValueError(
                f"template placeholder {{{field}}} must be a plain name (no attributes, indexes)"
            )
        names.append(field)
    return names


class FixTemplate(KBModel):
    id: str = Field(pattern=KEBAB)
    title: str
    engine: Literal["vllm", "sglang", "tgi", "any"] = "vllm"
    command: str
    flags: dict[str, str] = Field(default_factory=dict)
    predicted: str = ""
    # Used when a placeholder cannot be computed from the evidence; shown as not computed.
    fallback_command: str | None = None
    disruption: int = Field(default=5, ge=0, le=9)
    withhold_if: list[str] = Field(default_factory=list, description="named conditions")

    @field_validator("command", "predicted", "fallback_command")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            template_fields(value)
        return value

    @field_validator("flags")
    @classmethod
    def _flag_templates(cls, value: dict[str, str]) -> dict[str, str]:
        for v in value.values():
            template_fields(v)
        return value

    def placeholders(self) -> set[str]:
        names = set(template_fields(self.command)) | set(template_fields(self.predicted))
        for v in self.flags.values():
            names |= set(template_fields(v))
        return names


class Cause(KBModel):
    id: str = Field(pattern=KEBAB)
    revision: int = Field(ge=1)
    title: str
    explanation: str
    # How the facts rank this cause: `signals` are signature ids whose presence supports it
    # directly (an NCCL "shared memory segment" warning); `check` names arithmetic in
    # bot.sizing.checks; `prior` is the confidence when neither can tell.
    signals: list[str] = Field(default_factory=list)
    check: str | None = Field(default=None, pattern=SNAKE)
    prior: float = Field(default=0.3, ge=0.0, le=1.0)
    fixes: list[FixTemplate] = Field(default_factory=list)


class Example(KBModel):
    source: str = Field(description="public URL the excerpt was taken from")
    text: str = Field(min_length=1)
    note: str = ""
    expect: Literal["top", "any"] = "top"


class ExampleSet(KBModel):
    problem: str = Field(pattern=KEBAB)
    match: list[Example] = Field(default_factory=list)
    near_miss: list[Example] = Field(default_factory=list)


class ChangelogEntry(KBModel):
    version: str
    date: str
    changes: list[str] = Field(min_length=1)


class KBMeta(KBModel):
    version: str
    changelog: list[ChangelogEntry] = Field(min_length=1)
