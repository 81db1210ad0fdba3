"""Ranking: the terminal error beats the warnings before it; specific beats generic; context
decides which OOM it is; a fallback only speaks when nothing specific did."""

from __future__ import annotations

from pathlib import Path

from bot.authoring.examples import match_problems
from bot.kb.loader import load_kb
from bot.kb.match import CompiledKB
from tests.kb.test_validation import make_kb

PROBLEMS = {
    "problems/demo-problem.yaml": """\
id: demo-problem
revision: 1
title: No KV blocks
short_answer: x
memory_problem: true
signatures:
  - id: demo-sig
    pattern: 'No available memory for the cache blocks'
    weight: 0.95
  - id: zero-blocks
    pattern: '# (?:GPU|cuda|CUDA) blocks: 0,'
    anchors: [' blocks: 0,']
    kind: info
    weight: 0.6
""",
    "problems/preempt.yaml": """\
id: preempt
revision: 1
title: Preemption
short_answer: x
memory_problem: true
signatures:
  - id: preempted
    pattern: 'is preempted by PreemptionMode'
    kind: warning
    weight: 0.9
""",
    "problems/oom-load.yaml": """\
id: oom-load
revision: 1
title: OOM loading
short_answer: x
memory_problem: true
signatures:
  - id: oom-in-load
    pattern: 'CUDA out of memory'
    weight: 0.9
    context: {any: ['in load_model'], within: 20}
""",
    "problems/oom-start.yaml": """\
id: oom-start
revision: 1
title: OOM at start
short_answer: x
memory_problem: true
signatures:
  - id: oom-in-capture
    pattern: 'CUDA out of memory'
    weight: 0.9
    context: {any: ['in capture_model'], within: 20}
  - id: oom-generic
    pattern: 'CUDA out of memory'
    weight: 0.5
    fallback: true
""",
}


def compiled(tmp_path: Path) -> CompiledKB:
    root = make_kb(tmp_path, extra=PROBLEMS)
    return CompiledKB(load_kb(roots=[root], use_cache=False))


def test_the_terminal_error_outranks_earlier_warnings(tmp_path: Path) -> None:
    text = ("WARNING Sequence group 1 is preempted by PreemptionMode.RECOMPUTE mode\n"
            "ValueError: No available memory for the cache blocks.\n")
    assert match_problems(compiled(tmp_path), text) == ["demo-problem", "preempt"]


def test_warning_alone_is_reported(tmp_path: Path) -> None:
    text = "WARNING Sequence group 1 is preempted by PreemptionMode.SWAP mode\n"
    assert match_problems(compiled(tmp_path), text) == ["preempt"]


def test_traceback_context_decides_the_oom_phase(tmp_path: Path) -> None:
    c = compiled(tmp_path)
    load = ('  File "worker.py", line 1, in load_model\n'
            'torch.OutOfMemoryError: CUDA out of memory.\n')
    capture = ('  File "worker.py", line 9, in capture_model\n'
               'torch.OutOfMemoryError: CUDA out of memory.\n')
    assert match_problems(c, load) == ["oom-load"]
    assert match_problems(c, capture) == ["oom-start"]


def test_context_too_far_back_does_not_count(tmp_path: Path) -> None:
    text = ('  File "worker.py", line 1, in load_model\n' + "noise\n" * 30
            + "torch.OutOfMemoryError: CUDA out of memory.\n")
    # the load_model frame is 31 lines up, beyond `within: 20`: only the fallback speaks
    assert match_problems(compiled(tmp_path), text) == ["oom-start"]


def test_fallback_is_silent_when_a_specific_signature_explains_the_line(tmp_path: Path) -> None:
    c = compiled(tmp_path)
    text = '  File "w.py", line 1, in load_model\ntorch.OutOfMemoryError: CUDA out of memory.\n'
    assert "oom-start" not in match_problems(c, text)


def test_unrelated_text_matches_nothing(tmp_path: Path) -> None:
    text = "RuntimeError: NCCL error: unhandled system error\nKV cache usage fine\n"
    assert match_problems(compiled(tmp_path), text) == []


def test_supporting_lines_raise_confidence_and_are_evidence(tmp_path: Path) -> None:
    from bot.evidence.base import FactSink
    from bot.evidence.scan import Scanner
    from bot.kb.match import Matcher

    text = ("INFO # cuda blocks: 0, # CPU blocks: 4681\n"
            "ValueError: No available memory for the cache blocks.\n")
    m = Matcher(compiled(tmp_path))
    Scanner([m]).scan(text, FactSink())
    top = m.problems()[0]
    assert top.id == "demo-problem"
    assert top.confidence == 0.98
    assert top.line_numbers == [1, 2]
    assert top.evidence[1].startswith("ValueError: No available memory")
