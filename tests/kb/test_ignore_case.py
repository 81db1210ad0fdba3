"""A signature that ignores case matches in every casing: each line of the shipped examples
that fires one still fires it written in capitals, in lower case, swapped or title-cased
(refusing at load what could not, is tested in test_validation). What it needs from other
text (`in_paste`: the program's words, such as NCCL's) is matched as written, so those words
keep their case."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.authoring.examples import scan_text
from bot.evidence.paste import is_prose
from bot.kb.loader import load_kb
from bot.kb.match import CompiledKB

KB = load_kb(use_cache=False)
COMPILED = CompiledKB(KB)
SIGNATURES = {s.id: s for s in [*(s for p in KB.problems.values() for s in p.signatures),
                                *(s for c in KB.causes.values() for s in c.signatures)]}
CASE_BLIND = {s.id for s in [*(s for p in KB.problems.values() for s in p.signatures),
                             *(s for c in KB.causes.values() for s in c.signatures)]
              if s.ignore_case}


def lines_that_fire() -> list[tuple[str, str]]:
    """(signature, line) for each case-blind signature and each example line it fires on by
    itself."""
    out: dict[tuple[str, str], None] = {}
    for exset in KB.examples.values():
        for ex in exset.match:
            hits = scan_text(COMPILED, ex.text).hits
            for sid in CASE_BLIND & set(hits):
                for hit in hits[sid]:
                    if sid in scan_text(COMPILED, hit.line).hits:
                        out[(sid, hit.line)] = None
    return list(out)


CASES = lines_that_fire()
def recase(line: str, casing: Callable[[str], str], keep: list[str]) -> str:
    """`line` in another casing, except the words in `keep`, which stay as written."""
    other = casing(line)
    if len(other) != len(line):
        return other
    for word in keep:
        at = line.find(word)
        while at >= 0:
            other = other[:at] + word + other[at + len(word):]
            at = line.find(word, at + 1)
    return other


CASINGS = {"upper": str.upper, "lower": str.lower, "swapped": str.swapcase, "title": str.title}


def test_every_case_blind_signature_is_tried() -> None:
    assert {sid for sid, _ in CASES} == CASE_BLIND


@pytest.mark.parametrize(("sid", "line"), CASES, ids=[f"{s}/{i}" for i, (s, _) in
                                                      enumerate(CASES)])
def test_a_case_blind_signature_fires_in_every_casing(sid: str, line: str) -> None:
    for name, casing in CASINGS.items():
        other = recase(line, casing, SIGNATURES[sid].in_paste)
        if is_prose(line) and not is_prose(other):
            continue  # "ERROR RESPONSE FROM DAEMON" reads as a log line, which phrases skip
        assert sid in scan_text(COMPILED, other).hits, f"{name}: {other[:120]!r}"
