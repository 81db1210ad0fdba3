"""Loading the knowledge base: the shipped folder plus site folders, validated and hashed.

A site adds entries without touching code by pointing INFERBOT_KB_PATH at folders laid out like
knowledge/ (problems/, causes/, examples/). An entry with the same id and a higher `revision`
replaces the shipped one; the same id at the same revision twice is an error.

The loaded KB carries a content hash over every file it read; diagnoses record it. The loaded
KB is kept between runs (bot.pickled), named by its files' sizes and times, so `inferbot
diagnose` does not parse YAML on every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from bot.configfile import raw_setting
from bot.kb import schema
from bot.kb.errors import KBError
from bot.kb.safety import derive_anchor
from bot.kb.schema import (
    Cause,
    ExampleSet,
    KBMeta,
    Phase,
    PhaseSet,
    Phrase,
    Problem,
    Signature,
    Untested,
    template_fields,
)
from bot.lazyre import lazy
from bot.pickled import files_key, kept
from bot.structs import struct

if TYPE_CHECKING:
    from bot.kb.yamlio import Doc

def _shipped() -> Path:
    """The shipped KB: inside the installed package (a wheel carries it as bot/knowledge), else
    at the top of the source tree (a checkout, an editable install)."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "knowledge"
    return installed if installed.is_dir() else package.parent / "knowledge"


SHIPPED = _shipped()
CACHE_FORMAT = 5


@struct
class Origin:
    """Where a KB entry was defined (file and line), for errors that point at it."""
    path: str
    line: int | None


@struct
class KB:
    """The validated knowledge base, as loaded from files or the cache.

    The examples are half of it and no diagnosis reads them: a cached KB is kept without them
    and reads them (from a cache of their own) the first time `examples` is asked for."""
    meta: KBMeta
    content_hash: str
    problems: dict[str, Problem]
    causes: dict[str, Cause]
    # by the problem or cause id they test; None until read (see `examples`)
    loaded_examples: dict[str, ExampleSet] | None
    origins: dict[str, Origin] = field(default_factory=dict)  # "problem:ID" -> where defined
    example_docs: dict[str, str] = field(default_factory=dict)  # problem id -> examples file
    roots: list[str] = field(default_factory=list)
    # The literal anchors of each signature id and each context pattern, derived by parsing the
    # regexes: done once at load and cached with the KB, since it costs more than a diagnosis.
    anchors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)  # most specific first (phases.yaml)
    untested: Untested = field(default_factory=Untested)  # gaps in the examples (untested.yaml)

    # the key the cache keeps this KB under ("" when it was not kept): its examples' too
    cache_key: str = ""

    @property
    def version(self) -> str:
        return self.meta.version

    @property
    def examples(self) -> dict[str, ExampleSet]:
        if self.loaded_examples is None:
            roots = [Path(r) for r in self.roots]
            self.loaded_examples = kept(
                "kb-examples", self.cache_key, _cached_classes(),
                lambda: _load(roots, self.content_hash).examples,
                lambda found: isinstance(found, dict))
        return self.loaded_examples


def kb_roots(extra: str | None = None) -> list[Path]:
    """The shipped folder first, then site folders from INFERBOT_KB_PATH (os.pathsep list)."""
    roots = [SHIPPED]
    spec = extra if extra is not None else raw_setting("INFERBOT_KB_PATH") or ""
    for part in spec.split(os.pathsep):
        if part.strip():
            roots.append(Path(part).expanduser())
    return roots


def _files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise KBError(root, None, "knowledge folder not found")
    return sorted(p for p in root.rglob("*.yaml") if p.is_file())


def content_hash(roots: list[Path]) -> str:
    h = hashlib.sha256()
    for root in roots:
        for path in _files(root):
            h.update(str(path.relative_to(root)).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


def _cached_classes() -> list[type]:
    return [KB, Origin, *(v for v in vars(schema).values()
                          if isinstance(v, type) and dataclasses.is_dataclass(v))]


def load_kb(extra: str | None = None, use_cache: bool = True, *,
            roots: Sequence[Path] | None = None) -> KB:
    """The validated KB: the shipped folder and the site folders (`extra`, else
    INFERBOT_KB_PATH), or exactly `roots` when given (the first holds kb.yaml), as a test or a
    tool uses a KB of its own. Raises KBError (file and line) on the first structural problem."""
    roots = list(roots) if roots is not None else kb_roots(extra)
    if not use_cache:
        return _load(roots, content_hash(roots))
    key = f"{files_key(path for root in roots for path in _files(root))}-f{CACHE_FORMAT}"

    def build() -> KB:
        kb = _load(roots, content_hash(roots))
        return dataclasses.replace(kb, loaded_examples=None, cache_key=key)

    return kept("kb", key, _cached_classes(), build, lambda found: isinstance(found, KB))


def _load(roots: list[Path], digest: str) -> KB:
    from bot.kb.yamlio import load  # only here: a cached start never parses YAML

    meta: KBMeta | None = None
    problems: dict[str, Problem] = {}
    causes: dict[str, Cause] = {}
    examples: dict[str, ExampleSet] = {}
    origins: dict[str, Origin] = {}
    example_docs: dict[str, str] = {}

    def place(kind: str, obj: Problem | Cause, doc: Doc, table: dict[str, Problem] | dict[
            str, Cause]) -> None:
        key = f"{kind}:{obj.id}"
        line = doc.line_of(("id",))
        old = table.get(obj.id)
        if old is not None:
            if obj.revision == old.revision:
                prev = origins[key]
                raise KBError(doc.path, line, f"duplicate {kind} id {obj.id!r} (also at "
                              f"{prev.path}:{prev.line}); raise `revision` to override")
            if obj.revision < old.revision:
                return
        table[obj.id] = obj  # type: ignore[assignment]
        origins[key] = Origin(str(doc.path), line)

    phases: dict[str, Phase] = {}
    untested = Untested()
    for root in roots:
        untested_yaml = root / "untested.yaml"
        if untested_yaml.is_file():
            more = load(untested_yaml).validate(Untested)
            untested = Untested(must_match={**untested.must_match, **more.must_match},
                                near_miss={**untested.near_miss, **more.near_miss})
        kb_yaml = root / "kb.yaml"
        if kb_yaml.is_file() and root == roots[0]:
            meta = load(kb_yaml).validate(KBMeta)
        phases_yaml = root / "phases.yaml"
        if phases_yaml.is_file():
            # a site's phases file adds markers to the shipped phases, or new phases after them
            for ph in load(phases_yaml).validate(PhaseSet).phases:
                old = phases.get(ph.id)
                phases[ph.id] = ph if old is None else Phase(
                    id=ph.id, title=old.title, frames=[*old.frames, *ph.frames],
                    milestones=[*old.milestones, *ph.milestones], said=[*old.said, *ph.said])
        for sub, kind in (("problems", "problem"), ("causes", "cause")):
            folder = root / sub
            if not folder.is_dir():
                continue
            for path in sorted(folder.glob("*.yaml")):
                doc = load(path)
                if kind == "problem":
                    _put_phrases(doc, meta.phrases if meta else {})
                    place(kind, doc.validate(Problem), doc, problems)
                else:
                    place(kind, doc.validate(Cause), doc, causes)
        folder = root / "examples"
        if folder.is_dir():
            for path in sorted(folder.glob("*.yaml")):
                doc = load(path)
                ex = doc.validate(ExampleSet)
                if ex.owner in examples and root == roots[0]:
                    raise KBError(path, doc.line_of(("problem",)),
                                  f"second example file for {ex.owner!r}")
                if ex.owner in examples:
                    # site examples add to the shipped ones
                    prev = examples[ex.owner]
                    ex = ExampleSet(problem=ex.problem, cause=ex.cause,
                                    match=[*prev.match, *ex.match],
                                    near_miss=[*prev.near_miss, *ex.near_miss])
                examples[ex.owner] = ex
                example_docs.setdefault(ex.owner, str(path))
    if meta is None:
        raise KBError(roots[0] / "kb.yaml", None, "missing: the KB needs a version and changelog")
    kb = KB(meta, digest, problems, causes, examples, origins, example_docs,
            [str(r) for r in roots], phases=list(phases.values()), untested=untested)
    check_references(kb)
    return kb


PHRASE = lazy(r"<<([a-z][a-z0-9_]*)>>")  # only a cache miss reads YAML


def _put_phrases(doc: Doc, phrases: dict[str, Phrase]) -> None:
    """Each `<<name>>` in a signature's pattern and with_any replaced by kb.yaml's phrase (as
    a group), and an anchors entry `<<name>>` by the phrase's anchors; an unknown name is an
    error at the signature's line."""
    sigs = doc.value.get("signatures") if isinstance(doc.value, dict) else None
    for i, sig in enumerate(sigs if isinstance(sigs, list) else []):
        if not isinstance(sig, dict):
            continue
        for key in ("pattern", "with_any", "anchors"):
            value = sig.get(key)
            texts = value if isinstance(value, list) else [value]
            names = {n for t in texts if isinstance(t, str) for n in PHRASE.findall(t)}
            if not names:
                continue
            unknown = sorted(names - phrases.keys())
            if unknown:
                raise KBError(doc.path, doc.line_of(("signatures", i, key)),
                              f"signatures.{i}.{key}: unknown phrase <<{unknown[0]}>> "
                              f"(kb.yaml phrases: {', '.join(sorted(phrases)) or 'none'})")
            out: list[object] = []
            for text in texts:
                if not isinstance(text, str):
                    out.append(text)
                elif key == "anchors" and PHRASE.fullmatch(text):
                    out += phrases[text[2:-2]].anchors
                else:
                    out.append(PHRASE.sub(lambda m: f"(?:{phrases[m.group(1)].pattern})", text))
            sig[key] = out if isinstance(value, list) else out[0]


def check_references(kb: KB) -> None:
    """Ids that point nowhere, conditions and template values that code does not provide."""
    from bot.kb.vocabulary import CONDITIONS, template_values

    values = template_values()

    phase_ids = [ph.id for ph in kb.phases]
    seen_sig: dict[str, str] = {}

    def signature(sig: Signature, owner: str, where: Origin) -> None:
        if sig.id in seen_sig:
            raise KBError(where.path, where.line,
                          f"duplicate signature id {sig.id!r} (also in {seen_sig[sig.id]})")
        seen_sig[sig.id] = owner
        try:
            kb.anchors[sig.id] = sig.effective_anchors()
        except ValueError as exc:
            raise KBError(where.path, where.line, str(exc)) from None
        for phase in sig.phases:
            if phase not in phase_ids:
                raise KBError(where.path, where.line, f"signature {sig.id}: unknown phase "
                              f"{phase!r} (phases.yaml has {phase_ids})")
        for pattern in [*sig.context.any, *sig.context.none] if sig.context else []:
            anchor = derive_anchor(pattern)
            assert anchor is not None  # Context validation guarantees one
            kb.anchors[pattern] = (anchor,)

    def condition(name: str, what: str, where: Origin) -> None:
        if name not in CONDITIONS:
            raise KBError(where.path, where.line, f"{what}: unknown condition {name!r} "
                          f"(known: {', '.join(sorted(CONDITIONS))})")

    for p in kb.problems.values():
        where = kb.origins[f"problem:{p.id}"]
        for sig in p.signatures:
            signature(sig, p.id, where)
        for cid in p.causes:
            if cid not in kb.causes:
                raise KBError(where.path, where.line, f"problem {p.id}: unknown cause {cid!r}")
        if p.phase is not None and p.phase not in phase_ids:
            raise KBError(where.path, where.line, f"problem {p.id}: unknown phase {p.phase!r} "
                          f"(phases.yaml has {phase_ids})")
        for rid in p.related:
            if rid not in kb.problems:
                raise KBError(where.path, where.line, f"problem {p.id}: unknown related {rid!r}")
        for claim in p.claims:
            if claim.problem not in kb.problems:
                raise KBError(where.path, where.line,
                              f"problem {p.id}: claims unknown problem {claim.problem!r}")
            condition(claim.when, f"problem {p.id} claims", where)
        for name in p.implied_by:
            condition(name, f"problem {p.id} implied_by", where)
        for name in p.ruled_out_by:
            condition(name, f"problem {p.id} ruled_out_by", where)
    for c in kb.causes.values():
        for sig in c.signatures:
            signature(sig, c.id, kb.origins[f"cause:{c.id}"])
    for c in kb.causes.values():
        where = kb.origins[f"cause:{c.id}"]
        for sup in c.supports:
            if sup.signal is not None and sup.signal not in seen_sig:
                raise KBError(where.path, where.line,
                              f"cause {c.id}: unknown signal {sup.signal!r}")
            if sup.when is not None:
                condition(sup.when, f"cause {c.id} supports", where)
        for name in c.rules_out:
            condition(name, f"cause {c.id} rules_out", where)
        for fx in c.fixes:
            for cond in fx.withhold_if:
                condition(cond, f"fix {fx.id} withhold_if", where)
            for tmpl in [fx.command, fx.predicted, fx.fallback_command or "",
                         *fx.flags.values()]:
                for name in template_fields(tmpl):
                    if name not in values:
                        raise KBError(where.path, where.line,
                                      f"fix {fx.id}: unknown value {{{name}}}")
    from bot.schema import Facts, field_names

    fact_names = set(field_names(Facts))
    for owner, exset in kb.examples.items():
        where = Origin(kb.example_docs[owner], None)
        for ex in exset.near_miss:
            if ex.asserts_answer:
                raise KBError(where.path, None, f"examples for {owner!r}: a near-miss cannot "
                              "say what the answer holds (cause, phase, facts)")
        for ex in exset.match:
            if ex.cause is not None and ex.cause not in kb.causes:
                raise KBError(where.path, None, f"examples for {owner!r}: unknown cause "
                              f"{ex.cause!r}")
            if ex.phase is not None and ex.phase not in phase_ids:
                raise KBError(where.path, None, f"examples for {owner!r}: unknown phase "
                              f"{ex.phase!r} (phases.yaml has {phase_ids})")
            unknown = sorted(set(ex.facts) - fact_names)
            if unknown:
                raise KBError(where.path, None, f"examples for {owner!r}: unknown facts "
                              f"{unknown}")
        if exset.problem is not None and owner not in kb.problems:
            raise KBError(kb.example_docs[owner], None, f"examples for unknown problem {owner!r}")
        if exset.cause is not None:
            if owner not in kb.causes:
                raise KBError(kb.example_docs[owner], None,
                              f"examples for unknown cause {owner!r}")
            if not (kb.causes[owner].signatures or kb.causes[owner].supports):
                raise KBError(kb.example_docs[owner], None,
                              f"examples for cause {owner!r}, which nothing can support")
