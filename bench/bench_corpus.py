"""The diagnosis measured on the project's public corpus of real pastes (corpus/pastes.jsonl).

Prints, over every case and per messiness tag: top-1 (the expected problem or one the label
also accepts), false memory claims (a memory problem named anywhere on a paste whose problem is
not GPU memory), the expected root cause in the top two (cases whose thread shows one), the
phase read off the paste, and the confusion table of expected against found top problems.
Usage: python bench/bench_corpus.py [--misses] [--only ID ...] [--corpus FILE]
(--corpus scores another file of cases in the same format, such as a held-out batch.)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.kb.loader import load_kb  # noqa: E402
from tests.corpus.score import CORPUS, judge, load_cases, memory_problems, run  # noqa: E402

_PHASES = {"startup": "startup-other", "warmup": "profiling", None: "n/a"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", action="store_true", help="one line per miss")
    ap.add_argument("--only", nargs="*", help="case ids to run")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="cases (JSON lines)")
    args = ap.parse_args()
    kb = load_kb(use_cache=False)
    memory = memory_problems(kb)
    cases = [c for c in load_cases(args.corpus) if not args.only or c["id"] in args.only]
    started = time.perf_counter()
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    confusion: Counter[tuple[str, str]] = Counter()
    for case in cases:
        d = run(case, kb)
        v = judge(case, d, memory)
        found_phase = _PHASES.get(d.facts.phase, d.facts.phase)
        for group in ("all", *case["messiness"], "memory" if case["memory"] else "non-memory"):
            t = tally[group]
            t["cases"] += 1
            t["top1"] += v.problem_ok
            t["nonmem"] += not case["memory"]
            t["false_memory"] += bool(v.false_memory)
            t["with_cause"] += v.cause_ok is not None
            t["cause_top2"] += bool(v.cause_ok)
            t["with_phase"] += case["phase"] not in ("n/a", None)
            t["phase_ok"] += case["phase"] not in ("n/a", None) and found_phase == case["phase"]
        confusion[(case["expected_problem"], v.top)] += 1
        if args.misses:
            if not v.problem_ok:
                print(f"miss {case['id']}: {v.top}, expected {case['expected_problem']} "
                      f"{case.get('also_acceptable') or ''}")
            if v.false_memory:
                print(f"false memory claim {case['id']}: {v.false_memory}")
            if v.cause_ok is False:
                print(f"cause {case['id']}: {v.causes[:3]}, expected {v.cause_expected}")
    took = time.perf_counter() - started
    print(f"{len(cases)} cases in {took:.1f} s ({took / max(len(cases), 1) * 1000:.0f} ms each)")
    print(f"{'group':<14}{'cases':>6}{'top-1':>14}{'false memory':>16}{'cause top 2':>14}"
          f"{'phase':>14}")
    for group in sorted(tally, key=lambda g: (g != "all", g)):
        t = tally[group]
        print(f"{group:<14}{t['cases']:>6}{_pct(t['top1'], t['cases']):>14}"
              f"{_pct(t['false_memory'], t['nonmem']):>16}"
              f"{_pct(t['cause_top2'], t['with_cause']):>14}"
              f"{_pct(t['phase_ok'], t['with_phase']):>14}")
    print("\nconfusion (expected -> found top problem, off-diagonal only):")
    for (want, got), n in sorted(confusion.items(), key=lambda kv: -kv[1]):
        if want != got:
            print(f"  {n:>3}  {want} -> {got}")
    return 0


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} {100 * n / d:.0f}%" if d else "-"


if __name__ == "__main__":
    raise SystemExit(main())
