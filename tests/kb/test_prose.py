"""People's words as evidence: typos and shorthand name their problem, weaker than a log line,
and never turn a paste whose log shows another failure into a memory claim."""

from __future__ import annotations

import pytest

from bot.diagnose import diagnose
from bot.kb.loader import KB, load_kb
from bot.render.present import present
from bot.schema import Diagnosis, Evidence


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


def run(kb: KB, text: str) -> Diagnosis:
    return diagnose(Evidence(text=text), kb)


@pytest.mark.parametrize(("text", "problem"), [
    ("getting cuda out of memoy when the server starts", "oom-during-startup-profiling"),
    ("vram OOO again on the 4090", "oom-during-startup-profiling"),
    ("OOM after the profile run", "oom-during-startup-profiling"),
    ("it runs fine, then OOM when many concurrent requests come in", "oom-under-load"),
    ("we hit OOM while loading the weights of the 70b", "oom-loading-weights"),
    ("NCCLerror on the second node, tp=16", "nccl-failure"),
    ("the job hangs at NCCL init forever", "nccl-failure"),
    ("480 preemptions in the last hour", "kv-cache-preemption"),
    ("kv cache usage is 100% and requests are stuck pending", "kv-cache-preemption"),
    ("the second instance fails to start on the same GPU", "free-memory-below-utilization"),
    ("two vllm servers on one GPU: the second one crashes", "free-memory-below-utilization"),
    ("generation is super slow, only 3 tokens/s on an A100", "low-throughput"),
    ("推理速度很慢，怎么办", "low-throughput"),
])
def test_a_phrase_names_its_problem_and_says_it_is_weaker(kb: KB, text: str,
                                                          problem: str) -> None:
    d = run(kb, text)
    assert d.top is not None and d.top.id == problem, [p.id for p in d.problems]
    assert d.top.from_prose and d.top.confidence < 0.8


@pytest.mark.parametrize("text", [
    "there is no OOM error, it just hangs",
    "--preemption-mode is not supported by the V1 Engine. Falling back to V0.",
    "INFO 09-26 11:35:25 metrics.py:351] Avg prompt throughput: 2.3 tokens/s, Avg generation "
    "throughput: 0.2 tokens/s, Running: 1 reqs, Pending: 0 reqs",
])
def test_near_misses_name_nothing(kb: KB, text: str) -> None:
    assert [p.id for p in run(kb, text).problems] == []


def test_a_log_line_outranks_a_sentence(kb: KB) -> None:
    text = ("it is probably an OOM\n"
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.\n")
    d = run(kb, text)
    assert d.top is not None and d.top.id == "kv-cache-no-blocks" and not d.top.from_prose


@pytest.mark.parametrize("text", [
    # the framing says OOM; the log says the host's OOM killer and an NCCL timeout
    "we get OOM during rollout\n(raylet) node_manager.cc:3069: 1 Workers (tasks / actors) "
    "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons",
    "CPU OOM, I think\n[rank1]:[E206 16:45:19.236 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=5919, OpType=_ALLGATHER_BASE)",
    "the server is slow and then OOM\nKilled",
])
def test_a_sentence_never_makes_a_memory_claim_against_the_log(kb: KB, text: str) -> None:
    d = run(kb, text)
    memory = [p.id for p in d.problems if kb.problems[p.id].memory_problem or
              p.id == "low-throughput"]
    assert memory == []


def test_a_quoted_message_inside_a_sentence_is_the_users_report(kb: KB) -> None:
    d = run(kb, "I always get `ValueError: No available memory for the cache blocks` at start")
    assert d.top is not None and d.top.id == "kv-cache-no-blocks" and d.top.from_prose


@pytest.mark.parametrize(("question", "says"), [
    ("will qwen 72b fit on two h100s?",
     ["Fits with 67.72 GiB of weights per GPU at TP 2", "up to 8,112 tokens"]),
    ("can i run llama 70b on one a100 80g", ["Does not fit: 131.41 GiB of weights per GPU"]),
])
def test_a_question_about_a_model_and_a_gpu_is_answered_with_the_fit(
        kb: KB, question: str, says: list[str]) -> None:
    shown = present(run(kb, question))
    first = "\n".join(line.plain for sec in shown.first for line in sec.lines)
    assert shown.title.startswith("Sizing: ")
    assert all(s in first for s in says), first
    assert "no failure I know" not in first
    assert "inferbot size " in first  # the calculator for other settings, ready to paste
