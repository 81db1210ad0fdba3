"""Running the KB's own examples: every excerpt must match its problem (or, for a cause, have
a diagnosis support it with evidence), no near-miss may.

This is what `inferbot kb test` and `inferbot kb validate` run, and what the test suite runs,
so a KB edit that breaks an example fails the same way everywhere. Excerpts are read as a
diagnosis reads a paste (rebuilt into logical lines first).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bot.evidence.base import FactSink
from bot.evidence.paste import unwrap
from bot.evidence.scan import Scanner
from bot.kb.errors import KBError
from bot.kb.loader import KB
from bot.kb.match import CompiledKB, Matcher
from bot.kb.schema import Example
from bot.kb.yamlio import load
from bot.structs import struct

if TYPE_CHECKING:
    from bot.schema import Diagnosis


@struct(frozen=True)
class ExampleResult:
    problem_id: str  # the problem or cause the example set tests
    kind: str  # "match" | "near_miss"
    index: int
    source: str
    ok: bool
    got: list[str]  # problem ids found, best first (for a cause's examples: causes supported)
    path: str
    line: int | None
    wrong: tuple[str, ...] = ()  # what the answer says against the example's cause, phase, facts

    def message(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        found = ", ".join(self.got) or "nothing"
        if self.wrong:
            return (f"{where}: example {self.index} ({self.source}) is answered with "
                    f"{'; '.join(self.wrong)}")
        if self.kind == "match":
            return (f"{where}: example {self.index} ({self.source}) does not match "
                    f"{self.problem_id} as expected (found: {found})")
        return (f"{where}: near-miss {self.index} ({self.source}) matches {self.problem_id} "
                f"(found: {found})")


def scan_text(compiled: CompiledKB, text: str) -> Matcher:
    """The matching half of a diagnosis, no planning."""
    matcher = Matcher(compiled)
    Scanner([matcher]).scan(unwrap(text, compiled.vocabulary).text, FactSink())
    return matcher


def match_problems(compiled: CompiledKB, text: str) -> list[str]:
    """Problem ids for `text`, best first."""
    return [p.id for p in scan_text(compiled, text).problems()]


def supported_causes(kb: KB, text: str) -> list[str]:
    """The causes a whole diagnosis of `text` supports with evidence, best first: a cause
    shows in its signatures (a line that names it) or in the facts its conditions read (a
    second server, weights larger than the GPU), so its excerpts go through all of it."""
    return [c.id for c in _diagnosis(kb, text).causes if c.supported]


def _diagnosis(kb: KB, text: str) -> Diagnosis:
    from bot.diagnose import diagnose
    from bot.schema import Evidence

    return diagnose(Evidence(text=text), kb)


def answer_disagrees(ex: Example, d: Diagnosis) -> list[str]:
    """What the answer to a must-match says against what the example says it holds."""
    wrong = []
    top_cause = d.causes[0].id if d.causes else None
    if ex.cause is not None and top_cause != ex.cause:
        wrong.append(f"cause {top_cause} first (expected {ex.cause})")
    if ex.phase is not None and d.facts.phase != ex.phase:
        wrong.append(f"phase {d.facts.phase} (expected {ex.phase})")
    for name, want in ex.facts.items():
        have = getattr(d.facts, name)
        if have != want:
            wrong.append(f"{name} {have!r} (expected {want!r})")
    return wrong


def example_ids(kb: KB) -> list[tuple[str, str, int]]:
    """(owner, "match" | "near_miss", index) of every example in the KB, in a stable order."""
    return [(owner, kind, i) for owner, exset in sorted(kb.examples.items())
            for kind, items in (("match", exset.match), ("near_miss", exset.near_miss))
            for i in range(len(items))]


def check_example(kb: KB, compiled: CompiledKB, owner: str, kind: str, index: int
                  ) -> ExampleResult:
    """One example's verdict: a match must give its problem (top, when it says so) or have
    its cause supported, and the answer must hold what it says it holds; a near-miss must
    not match."""
    exset = kb.examples[owner]
    ex = (exset.match if kind == "match" else exset.near_miss)[index]
    d = _diagnosis(kb, ex.text) if exset.cause or ex.asserts_answer else None
    if exset.cause:
        assert d is not None
        got = [c.id for c in d.causes if c.supported]
        ok = (owner in got) == (kind == "match")
    else:
        got = [p.id for p in scan_text(compiled, ex.text).problems()]
        if kind == "match":
            ok = (got[:1] == [owner]) if ex.expect == "top" else owner in got
        else:
            ok = owner not in got
    wrong = tuple(answer_disagrees(ex, d)) if ok and d is not None else ()
    path = kb.example_docs[owner]
    return ExampleResult(owner, kind, index, ex.source, ok and not wrong, got, path,
                         load(Path(path)).line_of((kind, index)), wrong)


def run_examples(kb: KB) -> list[ExampleResult]:
    compiled = CompiledKB(kb)
    return [check_example(kb, compiled, owner, kind, i)
            for owner, kind, i in example_ids(kb)]


def coverage_errors(kb: KB, min_match: int = 3, min_near: int = 2) -> list[KBError]:
    """Every problem needs real excerpts that must match and near-misses that must not, and
    every signature is exercised both ways (`signature_coverage`), except the gaps
    untested.yaml lists, each with why."""
    errors = []
    for pid in sorted(kb.problems):
        origin = kb.origins[f"problem:{pid}"]
        ex = kb.examples.get(pid)
        n_match = len(ex.match) if ex else 0
        n_near = len(ex.near_miss) if ex else 0
        if n_match < min_match or n_near < min_near:
            errors.append(KBError(origin.path, origin.line,
                                  f"problem {pid} has {n_match} matching examples and {n_near} "
                                  f"near-misses; needs at least {min_match} and {min_near}"))
    fired, reached = signature_coverage(kb, CompiledKB(kb))
    owners = signature_owners(kb)
    listed = untested_path(kb)
    for way, covered, waived, what in (
            ("must_match", fired, kb.untested.must_match,
             "no must-match example of {owner} in which it fires"),
            ("near_miss", reached, kb.untested.near_miss,
             "no near-miss of {owner} that reaches it (holds one of its anchors)")):
        for sid, owner in sorted(owners.items()):
            origin = kb.origins[owner]
            if sid not in covered and sid not in waived:
                errors.append(KBError(origin.path, origin.line, f"signature {sid}: "
                                      + what.format(owner=owner.split(":", 1)[1])))
            elif sid in covered and sid in waived:
                errors.append(KBError(listed, None, f"{way}: {sid} is exercised now; remove "
                                      "it from the list"))
        for sid in sorted(set(waived) - set(owners)):
            errors.append(KBError(listed, None, f"{way}: no signature {sid!r}"))
    return errors


def signature_owners(kb: KB) -> dict[str, str]:
    """signature id -> "problem:ID" or "cause:ID" (the origin key of its owner)."""
    out = {s.id: f"problem:{p.id}" for p in kb.problems.values() for s in p.signatures}
    out.update({s.id: f"cause:{c.id}" for c in kb.causes.values() for s in c.signatures})
    return out


def signature_coverage(kb: KB, compiled: CompiledKB) -> tuple[set[str], set[str]]:
    """(signatures that fire in a must-match example of their owner, signatures that a
    near-miss of their owner reaches). A near-miss reaches a signature when it holds one of
    the signature's anchors, so the regex and its conditions, not the missing words, are
    what keeps it from matching; its example test asserts it does not."""
    owners = signature_owners(kb)
    fired: set[str] = set()
    reached: set[str] = set()
    for owner, exset in kb.examples.items():
        mine = [sid for sid, o in owners.items() if o.split(":", 1)[1] == owner]
        for ex in exset.match:
            fired.update(sid for sid in scan_text(compiled, ex.text).hits if sid in mine)
        for ex in exset.near_miss:
            folded = ex.text.lower()
            for sid in mine:
                cs = compiled.by_id[sid]
                text = folded if cs.sig.ignore_case else ex.text
                if any(a in text for a in cs.anchors):
                    reached.add(sid)
    return fired, reached


def untested_path(kb: KB) -> str:
    """Where the gaps are listed: the shipped folder's untested.yaml."""
    return str(Path(kb.roots[0]) / "untested.yaml") if kb.roots else "untested.yaml"
