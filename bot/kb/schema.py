"""The knowledge base's file formats.

Problems are symptoms (what the log shows); causes are why it happened (what the facts show);
fixes hang off causes. Everything here is data: patterns are regular expressions held to a
linear-time rule (see `bot.kb.safety`), checks and withhold conditions are names looked up in
code registries, and fix commands are `{name}` templates filled from computed values.

The types are frozen stdlib dataclasses validated by pydantic when a file is loaded
(`bot.kb.yamlio.Doc.validate`: unknown keys, wrong types and every `__post_init__` check become
errors with file and line). The loaded KB is cached as these same objects, so a cached start
needs neither YAML parsing nor pydantic.
"""

from __future__ import annotations

import re
import string
from dataclasses import field
from typing import Any, ClassVar, Literal

from bot.kb.safety import UnsafePattern, check_linear, derive_anchor
from bot.structs import struct

KEBAB = re.compile(r"[a-z0-9]{1,40}(?:-[a-z0-9]{1,40}){0,12}")
SNAKE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_FORBID: dict[str, Any] = {"extra": "forbid"}


# Checks raise "<key>: <message>"; bot.kb.yamlio reads the key to point at that key's line.


def _id(key: str, value: str) -> None:
    if not KEBAB.fullmatch(value):
        raise ValueError(f"{key}: {value!r} must be kebab-case (a-z, 0-9, -)")


def _range(key: str, value: float, lo: float, hi: float) -> None:
    if not lo <= value <= hi:
        raise ValueError(f"{key}: must be between {lo} and {hi}, got {value}")


def _linear_regex(key: str, value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{key}: bad regex {value!r}: {exc}") from None
    try:
        check_linear(value)
    except UnsafePattern as exc:
        raise ValueError(f"{key}: {exc}") from None


def template_fields(template: str) -> list[str]:
    """Placeholder names in a fix template; only plain `{name}` / `{name:spec}` are allowed."""
    names = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"bad template {template!r}: {exc}") from None
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not SNAKE.fullmatch(name):
            raise ValueError(
                f"template placeholder {{{name}}} must be a plain name (no attributes, indexes)"
            )
        names.append(name)
    return names


@struct(frozen=True, slots=True, kw_only=True)
class KBModel:
    """Base of the KB's file types: frozen, and unknown keys are errors when a file is validated."""

    __pydantic_config__: ClassVar[dict[str, Any]] = _FORBID


@struct(frozen=True, slots=True, kw_only=True)
class Context(KBModel):
    """Lines that must (or must not) appear shortly before a signature line for it to count.

    Tracebacks print the frames above the error, so "CUDA out of memory" after a `load_model`
    frame is a weight-loading OOM and after `capture_model` a CUDA-graph OOM.
    """

    any: list[str] = field(default_factory=list)  # at least one must appear
    none: list[str] = field(default_factory=list)  # none may appear
    within: int = 80  # lines before the signature

    def __post_init__(self) -> None:
        _range("within", self.within, 0, 2000)
        for key, values in (("any", self.any), ("none", self.none)):
            for v in values:
                _linear_regex(key, v)
                if derive_anchor(v) is None:
                    raise ValueError(f"{key}: pattern {v!r} needs a literal of 3+ characters")


@struct(frozen=True, slots=True, kw_only=True)
class Signature(KBModel):
    """A line (or a person's phrase) that shows a problem or a cause: a linear-time regex and its
    weight."""
    id: str
    pattern: str
    # error/warning/info: a log line at that level. prose: a person's words ("cuda out of
    # memoy", "the second instance fails"): weaker evidence, never above a log line.
    kind: Literal["error", "warning", "info", "prose"] = "error"
    weight: float = 0.9
    engine: Literal["vllm", "sglang", "tgi", "lmdeploy", "torch", "nccl", "nvidia", "any"] = "any"
    ignore_case: bool = False
    # Literals, one of which every matching line contains; derived from the pattern when
    # omitted. The scanner looks for these before it runs any regex, so they must be exact.
    anchors: list[str] = field(default_factory=list)
    context: Context | None = None
    # A fallback hit is dropped when the same line also matched a non-fallback signature.
    fallback: bool = False
    # A frame of a traceback whose error line is not in the paste (cut by whoever pasted it):
    # counts only when nothing after it shows how it ended (no exception or error line) and
    # no problem's error or warning signature matched anywhere. The frame then says what kind
    # of error it was: only memory errors are raised while the KV cache is being sized.
    cut: bool = False
    # Phases (knowledge/phases.yaml) the line must be in to count: a CUDA OOM under
    # `load_model` frames is a loading OOM, the same words under `execute_model` a serving one.
    phases: list[str] = field(default_factory=list)
    # Patterns of which one must also be found in the same line, anywhere: "OOM" and "while
    # loading" in either order, without a pattern that scans a window for both.
    with_any: list[str] = field(default_factory=list)
    # Literals of which one must appear anywhere in the paste, before or after the line: "it
    # hangs" is NCCL's only beside NCCL's own lines or a tensor-parallel setting.
    in_paste: list[str] = field(default_factory=list)
    note: str = ""

    def __post_init__(self) -> None:
        _id("id", self.id)
        _range("weight", self.weight, 0.01, 1.0)
        _linear_regex("pattern", self.pattern)
        for extra in self.with_any:
            _linear_regex("with_any", extra)
        for a in self.anchors:
            _literal("anchors", a)
        for a in self.in_paste:
            _literal("in_paste", a)
        try:
            anchors = self.effective_anchors()
        except ValueError as exc:
            raise ValueError(f"pattern: {exc}") from None
        if self.ignore_case:
            self._check_case_blind(anchors)

    def _check_case_blind(self, anchors: tuple[str, ...]) -> None:
        """An `ignore_case` signature must match its line in every casing, or it is refused:
        its anchors are found in the lower-cased line, so each must survive casing both ways
        ('ß' upper-cases to 'SS'), and a phrase signature folds ASCII letters only. What it
        needs from other lines (`context`, `in_paste`) is the program's text, matched as
        written."""
        if "(?-i" in self.pattern or any("(?-i" in p for p in self.with_any):
            raise ValueError("ignore_case: the pattern turns case-blindness off again")
        texts = [("anchors", a) for a in anchors] + [("pattern", self.pattern)]
        texts += [("with_any", p) for p in self.with_any]
        for key, text in texts:
            for ch in dict.fromkeys(text):
                if ch.lower() == ch.upper():
                    continue  # no case: digits, punctuation, most scripts
                if self.kind == "prose" and not ch.isascii():
                    raise ValueError(f"{key}: {ch!r} has a case, and a phrase signature folds "
                                     "ASCII letters only; spell both cases or drop ignore_case")
                if ch.lower().upper().lower() != ch.lower() or len(ch.upper()) != 1:
                    raise ValueError(f"{key}: {ch!r} does not keep its letters when its case "
                                     "changes; spell both cases or drop ignore_case")

    def effective_anchors(self) -> tuple[str, ...]:
        """The literals the scanner looks for. A case-insensitive signature's anchors are
        lower-cased and found in a lower-cased copy of the text, so every casing is found."""
        if self.anchors:
            base = self.anchors
        else:
            derived = derive_anchor(self.pattern)
            if derived is None:
                raise ValueError(f"signature {self.id}: no literal anchor in the pattern; "
                                 "list `anchors:`")
            base = [derived]
        if self.ignore_case:
            return tuple(dict.fromkeys(a.lower() for a in base))
        return tuple(dict.fromkeys(base))


def _literal(key: str, value: str) -> None:
    # 3 bytes: selective enough to search for ("GiB", or one CJK character and more)
    if len(value.encode()) < 3 or set(value) & set("<>&\r\n"):
        raise ValueError(f"{key}: {value!r} needs 3+ bytes and no < > & or newlines")


@struct(frozen=True, slots=True, kw_only=True)
class Phase(KBModel):
    """A stage of a server's life, told by the traceback above an error or the log before it.

    `frames` are literal text of a traceback frame (`profile_run`) or of a method the error
    line names ("while processing method determine_num_available_blocks"): an error under such
    a frame happened in this phase. "A && B" needs both on one line (a model's own module and
    `in __init__`: the model being built, so its weights being allocated). `milestones` are
    literal text of a line the server prints when the phase begins ("Loading model weights
    took" begins profiling): with no frames, an error after the last milestone happened in
    that milestone's phase. `said` are lower-case
    phrases a person uses for the phase ("under load", "while loading the model"): the weakest
    evidence, read from the user's own sentences only when the log shows no frame or milestone.
    """

    id: str
    title: str
    frames: list[str] = field(default_factory=list)
    milestones: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _id("id", self.id)
        for key, values in (("frames", self.frames), ("milestones", self.milestones),
                            ("said", self.said)):
            for v in values:
                for part in v.split(" && "):
                    _literal(key, part)
        for v in self.said:
            if v != v.lower():
                raise ValueError(f"said: {v!r} must be lower case (matched ignoring case)")


@struct(frozen=True, slots=True, kw_only=True)
class PhaseSet(KBModel):
    """knowledge/phases.yaml. Order matters: when a traceback shows frames of several phases
    (CUDA-graph capture runs a dummy forward pass, the V0 profile run calls execute_model),
    the phase listed first wins."""

    revision: int
    phases: list[Phase]

    def __post_init__(self) -> None:
        _range("revision", self.revision, 1, 10**6)
        ids = [p.id for p in self.phases]
        if len(set(ids)) != len(ids):
            raise ValueError(f"phases: duplicate id in {ids}")


@struct(frozen=True, slots=True, kw_only=True)
class Diagnostic(KBModel):
    """A read-only command that confirms a problem, with what its output means."""
    title: str
    command: str | None = None
    explain: str | None = None


@struct(frozen=True, slots=True, kw_only=True)
class FAQ(KBModel):
    """A question on-call engineers ask about a problem, and its answer."""
    q: str
    a: str


@struct(frozen=True, slots=True, kw_only=True)
class Claim(KBModel):
    """A match of `problem` that the paste could not place in a phase belongs to this problem
    when condition `when` holds: an OOM with no frames, on weights that cannot fit the GPU,
    happened while loading them."""

    problem: str
    when: str

    def __post_init__(self) -> None:
        _id("problem", self.problem)
        if not SNAKE.fullmatch(self.when):
            raise ValueError(f"when: {self.when!r} must be a snake_case condition name")


@struct(frozen=True, slots=True, kw_only=True)
class Problem(KBModel):
    """A symptom family (what the log shows): its signatures, its causes, its guide."""
    id: str
    revision: int
    title: str
    short_answer: str
    memory_problem: bool  # True when the symptom is about GPU memory
    # False for a complaint rather than a failure (slow generation): a person's words naming
    # a failure elsewhere (NCCL, host RAM) outweigh it as they outweigh a memory claim
    failure: bool = True
    # Where in a server's life the symptom itself arises ("No available memory for the cache
    # blocks" only while the KV cache is sized): the phase when nothing in the paste places it.
    phase: str | None = None
    signatures: list[Signature]
    # Candidate cause ids, the most common first for this symptom: the order in which the
    # answer names them when the evidence supports none.
    causes: list[str] = field(default_factory=list)
    confirm: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    prevention: list[str] = field(default_factory=list)
    architecture: str = ""
    faq: list[FAQ] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    affects: str = ""
    claims: list[Claim] = field(default_factory=list)
    # Conditions over the facts that show the problem when no line of the paste names any
    # failure: the log's own figures say the check failed (a KV cache of 3,664 tokens under
    # max_model_len 4,096) although the error line was cut.
    implied_by: list[str] = field(default_factory=list)
    # Conditions under which a match is not this problem whatever the line says: a CUDA OOM
    # for 20 MiB while 66 GiB are free is not a shortage of GPU memory.
    ruled_out_by: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _id("id", self.id)
        _range("revision", self.revision, 1, 10**6)
        for name in (*self.implied_by, *self.ruled_out_by):
            if not SNAKE.fullmatch(name):
                raise ValueError(f"implied_by: {name!r} must be a snake_case condition name")
        if not self.signatures:
            raise ValueError("signatures: a problem needs at least one signature")


@struct(frozen=True, slots=True, kw_only=True)
class FixTemplate(KBModel):
    """A fix as a command template whose `{name}` placeholders are filled from computed values."""
    id: str
    title: str
    engine: Literal["vllm", "sglang", "tgi", "lmdeploy", "any"] = "vllm"
    command: str
    flags: dict[str, str] = field(default_factory=dict)
    predicted: str = ""
    # Used when a placeholder cannot be computed from the evidence; shown as not computed.
    fallback_command: str | None = None
    disruption: int = 5  # 0 = a flag on restart ... 9 = new hardware
    withhold_if: list[str] = field(default_factory=list)  # named conditions

    def __post_init__(self) -> None:
        _id("id", self.id)
        _range("disruption", self.disruption, 0, 9)
        for key, tmpl in [("command", self.command), ("predicted", self.predicted),
                          ("fallback_command", self.fallback_command or ""),
                          *(("flags", v) for v in self.flags.values())]:
            try:
                template_fields(tmpl)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None


@struct(frozen=True, slots=True, kw_only=True)
class Support(KBModel):
    """One kind of evidence for a cause and how strongly it points there (`score`): a named
    condition over the facts (`when`, e.g. other_process_memory), or a signature that matched
    (`signal`, a problem's or a cause's signature id)."""

    when: str | None = None
    signal: str | None = None
    score: float = 0.8

    def __post_init__(self) -> None:
        if (self.when is None) == (self.signal is None):
            raise ValueError("when: give exactly one of `when` (a condition) or `signal`")
        if self.when is not None and not SNAKE.fullmatch(self.when):
            raise ValueError(f"when: {self.when!r} must be a snake_case condition name")
        if self.signal is not None:
            _id("signal", self.signal)
        _range("score", self.score, 0.05, 0.99)


@struct(frozen=True, slots=True, kw_only=True)
class Cause(KBModel):
    """A root cause. Its score is evidence, not opinion: the strongest `supports` entry that
    holds (with a little for each further one), 0 when a `rules_out` condition holds, and the
    `prior` only when the evidence says nothing. `signatures` are lines or phrases that name
    the cause outright ("must be divisible by tensor parallel size", "the second instance");
    a cause they find is a finding even when no problem family matched."""

    id: str
    revision: int
    title: str
    explanation: str
    prior: float = 0.2
    supports: list[Support] = field(default_factory=list)
    rules_out: list[str] = field(default_factory=list)  # condition names
    signatures: list[Signature] = field(default_factory=list)
    memory: bool = True  # False: not about GPU memory (NCCL, drivers, host RAM, config)
    fixes: list[FixTemplate] = field(default_factory=list)

    def __post_init__(self) -> None:
        _id("id", self.id)
        _range("revision", self.revision, 1, 10**6)
        _range("prior", self.prior, 0.0, 1.0)
        for name in self.rules_out:
            if not SNAKE.fullmatch(name):
                raise ValueError(f"rules_out: {name!r} must be a snake_case condition name")


FactValue = str | int | float | bool


@struct(frozen=True, slots=True, kw_only=True)
class Example(KBModel):
    """A real excerpt. A must-match may also say what the whole answer to it holds: the
    cause ranked first, the phase the failure is placed in, facts read from it."""

    source: str  # public URL the excerpt was taken from
    text: str
    note: str = ""
    expect: Literal["top", "any"] = "top"
    cause: str | None = None
    phase: str | None = None
    facts: dict[str, FactValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("text: an example needs text")
        if not self.source.startswith(("http://", "https://")):
            raise ValueError(f"source: {self.source!r} must be the public URL of the excerpt")
        if self.cause is not None:
            _id("cause", self.cause)
        for name in self.facts:
            if not SNAKE.fullmatch(name):
                raise ValueError(f"facts: {name!r} must be a Facts field name")

    @property
    def asserts_answer(self) -> bool:
        """Whether the example says more than which problem it is."""
        return self.cause is not None or self.phase is not None or bool(self.facts)


@struct(frozen=True, slots=True, kw_only=True)
class ExampleSet(KBModel):
    """Real excerpts for one problem (must be named the top problem, or among the problems
    with `expect: any`) or for one cause's own signatures (one of them must fire); near-misses
    must not."""

    problem: str | None = None
    cause: str | None = None
    match: list[Example] = field(default_factory=list)
    near_miss: list[Example] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (self.problem is None) == (self.cause is None):
            raise ValueError("problem: give exactly one of `problem` or `cause`")

    @property
    def owner(self) -> str:
        return self.problem or self.cause or ""


@struct(frozen=True, slots=True, kw_only=True)
class Untested(KBModel):
    """knowledge/untested.yaml: signatures the examples do not yet exercise both ways (a
    must-match where the signature fires, a near-miss that reaches it and must not), each with
    why. `inferbot kb validate` accepts exactly these gaps, so the list can only shrink."""

    must_match: dict[str, str] = field(default_factory=dict)
    near_miss: dict[str, str] = field(default_factory=dict)


@struct(frozen=True, slots=True, kw_only=True)
class ChangelogEntry(KBModel):
    """One KB release: version, date and what changed."""
    version: str
    date: str
    changes: list[str]


@struct(frozen=True, slots=True, kw_only=True)
class Phrase(KBModel):
    """A named regex fragment that several signatures share, with the anchors that find it."""
    pattern: str
    anchors: list[str]


@struct(frozen=True, slots=True, kw_only=True)
class KBMeta(KBModel):
    """kb.yaml: the KB's version, changelog and shared phrases."""
    version: str
    changelog: list[ChangelogEntry]
    # Named regex fragments that several signatures share (the words people use for an OOM):
    # a signature's pattern, with_any or anchors writes `<<name>>` and the loader puts the
    # phrase's pattern (or its anchors) in, so a new way of saying it is added once for every
    # problem that reads it.
    phrases: dict[str, Phrase] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.changelog:
            raise ValueError("changelog: needs at least one entry")
        for name, phrase in self.phrases.items():
            if not SNAKE.fullmatch(name):
                raise ValueError(f"phrases: {name!r} must be snake_case")
            _linear_regex(f"phrases.{name}.pattern", phrase.pattern)
            if not phrase.anchors:
                raise ValueError(f"phrases: {name} needs anchors (literals every match holds)")
