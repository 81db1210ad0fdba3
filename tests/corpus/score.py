"""Reading corpus/pastes.jsonl and judging a diagnosis against a case's labels.

Shared by the regression test beside this file and bench/bench_corpus.py, so the test and the
figures in a closing note judge a case the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.diagnose import diagnose
from bot.kb.loader import KB
from bot.schema import Diagnosis, Evidence

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "pastes.jsonl"
FIELDS = ("id", "source_repo", "issue_number", "url", "title", "text", "expected_problem",
          "also_acceptable", "phase", "memory", "expected_cause", "label_basis", "why",
          "messiness")


def load_cases(path: Path = CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


@dataclass(frozen=True)
class Verdict:
    case_id: str
    top: str  # the top problem id, or "none"
    problem_ok: bool
    false_memory: list[str]  # memory problems claimed on a paste whose problem is not memory
    cause_expected: str | None
    causes: list[str]  # ranked cause ids
    cause_ok: bool | None  # None: the case names no cause

    @property
    def ok(self) -> bool:
        return self.problem_ok and not self.false_memory and self.cause_ok is not False


def memory_problems(kb: KB) -> frozenset[str]:
    """Problems that claim GPU memory is short. Slow generation counts too (its causes are
    the KV pool's size), as in the scorer the corpus's first cases came with."""
    return frozenset(pid for pid, p in kb.problems.items()
                     if p.memory_problem or not p.failure)


def judge(case: dict[str, Any], d: Diagnosis, memory: Iterable[str]) -> Verdict:
    problems = [p.id for p in d.problems]
    top = problems[0] if problems else "none"
    accepted = {case["expected_problem"], *(case.get("also_acceptable") or [])}
    memory = frozenset(memory)
    # naming the problem the label expects is never a false claim, whatever its family
    false_memory = [] if case["memory"] else [p for p in problems
                                              if p in memory and p not in accepted]
    causes = [c.id for c in d.causes]
    expected = case.get("expected_cause")
    return Verdict(case["id"], top, top in accepted, false_memory, expected, causes,
                   None if expected is None else expected in causes[:2])


def run(case: dict[str, Any], kb: KB) -> Diagnosis:
    return diagnose(Evidence(text=case["text"]), kb)
