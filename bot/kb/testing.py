"""Running the KB's own examples: every excerpt must match its problem (or, for a cause, have
a diagnosis support it with evidence), no near-miss may.

This is what `inferbot kb test` and `inferbot kb validate` run, and what the test suite runs,
so a KB edit that breaks an example fails the same way everywhere. Excerpts are read as a
diagnosis reads a paste (rebuilt into logical lines first).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.evidence.base import FactSink
from bot.evidence.paste import unwrap
from bot.evidence.scan import Scanner
from bot.kb.errors import KBError
from bot.kb.loader import KB
from bot.kb.match import CompiledKB, Matcher
from bot.kb.yamlio import load


@dataclass(frozen=True)
class ExampleResult:
    problem_id: str  # the problem or cause the example set tests
    kind: str  # "match" | "near_miss"
    index: int
    source: str
    ok: bool
    got: list[str]  # problem ids found, best first
    path: str
    line: int | None

    def message(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        found = ", ".join(self.got) or "nothing"
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
    from bot.diagnose import diagnose
    from bot.schema import Evidence

    return [c.id for c in diagnose(Evidence(text=text), kb).causes if c.supported]


def example_ids(kb: KB) -> list[tuple[str, str, int]]:
    """(owner, "match" | "near_miss", index) of every example in the KB, in a stable order."""
    return [(owner, kind, i) for owner, exset in sorted(kb.examples.items())
            for kind, items in (("match", exset.match), ("near_miss", exset.near_miss))
            for i in range(len(items))]


def check_example(kb: KB, compiled: CompiledKB, owner: str, kind: str, index: int
                  ) -> ExampleResult:
    """One example's verdict: a match must give its problem (top, when it says so) or have
    its cause supported; a near-miss must not."""
    exset = kb.examples[owner]
    ex = (exset.match if kind == "match" else exset.near_miss)[index]
    if exset.cause:
        got = supported_causes(kb, ex.text)
        ok = (owner in got) == (kind == "match")
    else:
        got = [p.id for p in scan_text(compiled, ex.text).problems()]
        if kind == "match":
            ok = (got[:1] == [owner]) if ex.expect == "top" else owner in got
        else:
            ok = owner not in got
    path = kb.example_docs[owner]
    return ExampleResult(owner, kind, index, ex.source, ok, got, path,
                         load(Path(path)).line_of((kind, index)))


def run_examples(kb: KB) -> list[ExampleResult]:
    compiled = CompiledKB(kb)
    return [check_example(kb, compiled, owner, kind, i)
            for owner, kind, i in example_ids(kb)]


def coverage_errors(kb: KB, min_match: int = 3, min_near: int = 2) -> list[KBError]:
    """Every problem needs real excerpts that must match and near-misses that must not."""
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
    return errors
