"""The planner: causes ranked by the host's numbers, fixes computed, impossible ones withheld.

Runs on a small KB of its own (tests/sizing/data/kb), so what it asserts does not move when
the shipped knowledge/ entries change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.kb.loader import KB, load_kb
from bot.schema import Facts, Fix, GpuInfo, GpuProcess, ProblemMatch
from bot.sizing.plan import Plan, format_value, model_argument, plan, round_length

KB_DIR = Path(__file__).parent / "data" / "kb"
UTIL_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static")


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(roots=[KB_DIR], use_cache=False)


def no_blocks(*signatures: str) -> list[ProblemMatch]:
    return [ProblemMatch(id="t-kv-cache-no-blocks", title="No memory for the KV cache",
                         confidence=0.9, signature_ids=list(signatures))]


def raises_utilization(fix: Fix, facts: Facts) -> bool:
    current = facts.gpu_memory_utilization or 0.9
    values = [fix.flags.get(f) for f in UTIL_FLAGS]
    return any(isinstance(v, (int, float)) and v > current for v in values)


def by_id(p: Plan) -> dict[str, Fix]:
    return {f.id: f for f in p.fixes}


def test_max_model_len_case_leaves_headroom_below_the_fit_and_orders_least_disruptive_first(
        kb: KB) -> None:
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072,
                  gpu_memory_utilization=0.9, gpu_total_gib=22.05, kv_cache_needed_gib=16.0,
                  kv_cache_available_gib=9.97, weights_gib=14.99)
    p = plan(kb, no_blocks("vllm-max-seq-len-kv"), facts)
    assert p.sizing is not None and p.sizing.max_model_len_that_fits == 81_664
    assert p.causes[0].id == "t-max-model-len-too-large"
    assert "16.00 GiB" in p.causes[0].why and "9.97 GiB" in p.causes[0].why
    fix = by_id(p)["lower-max-model-len"]
    # the edge (81,664) holds one request: the largest round length leaving room for two
    assert fix.flags == {"--max-model-len": 32_768} and fix.computed
    assert fix.command.endswith("--max-model-len 32768")
    assert fix.predicted.startswith("2.5x concurrency at 32,768 tokens")
    assert "81,664 is the edge" in fix.predicted
    assert [f.disruption for f in p.fixes] == sorted(f.disruption for f in p.fixes)
    assert len({f.id for f in p.fixes}) == len(p.fixes)
    # even 0.95 x 22.05 cannot hold 16 GiB of KV next to the weights: not proposed
    assert not any(raises_utilization(f, facts) for f in p.fixes)
    reasons = {w.id: w.reason for w in p.withheld}
    assert "above the safe 0.95" in reasons["t-raise-gpu-memory-utilization"]
    assert "safe 0.90-0.95" in reasons["raise-utilization-too-far"]


def test_raise_utilization_when_it_fits_stays_in_the_safe_range(kb: KB) -> None:
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=32_768,
                  gpu_memory_utilization=0.85, gpu_total_gib=79.19, kv_cache_needed_gib=4.0,
                  kv_cache_available_gib=3.5, weights_gib=14.99,
                  processes=[GpuProcess(pid=1, name="vllm", used_mib=60_000, is_server=True)])
    p = plan(kb, no_blocks("vllm-max-seq-len-kv"), facts)
    fix = by_id(p)["t-raise-gpu-memory-utilization"]
    assert fix.flags == {"--gpu-memory-utilization": 0.9}
    assert fix.predicted.startswith("7.46 GiB of KV cache (from 3.50 GiB)")
    assert "safe 0.90-0.95" in fix.predicted
    assert p.causes[0].id in ("t-max-model-len-too-large", "t-gpu-memory-utilization-too-low")


def test_foreign_process_never_gets_a_utilization_raise(kb: KB) -> None:
    """#20305 shape: free 31.44/47.38 GiB < 0.9 x 47.38 = 42.64 GiB; a python process holds 15.6."""
    facts = Facts(engine="vllm", model="Qwen/Qwen3-8B", gpu_total_gib=47.38, free_memory_gib=31.44,
                  gpu_memory_utilization=0.9, requested_memory_gib=42.64, max_model_len=40_960,
                  kv_cache_available_gib=4.0, kv_cache_needed_gib=5.62,
                  gpus=[GpuInfo(index=0, name="NVIDIA RTX A6000", total_mib=49_140)],
                  processes=[GpuProcess(pid=4242, name="python", used_mib=16_000,
                                        is_server=False)])
    for signals in (("vllm-free-memory-startup",), ()):
        p = plan(kb, no_blocks(*signals), facts)
        top = [c.id for c in p.causes[: 1 if signals else 2]]
        assert "t-foreign-process-holds-memory" in top
        why = next(c.why for c in p.causes if c.id == "t-foreign-process-holds-memory")
        assert "pid 4242 python 15.62 GiB" in why
        assert not any(raises_utilization(f, facts) for f in p.fixes)
        lower = by_id(p)["lower-utilization-to-free"]
        assert lower.flags == {"--gpu-memory-utilization": 0.65}  # floor(31.44/47.38) - 0.01
        withheld = {w.id: w.reason for w in p.withheld}
        assert "pid 4242 python 15.62 GiB" in withheld["raise-utilization-unguarded"]
        assert "t-gpu-memory-utilization-too-low" not in {c.id for c in p.causes}


def test_weights_too_large_never_gets_a_utilization_raise(kb: KB) -> None:
    facts = Facts(engine="vllm", model="Llama 3 70B", gpu_name="NVIDIA A100-SXM4-80GB",
                  gpu_total_gib=79.15, gpu_memory_utilization=0.9, max_model_len=8192,
                  gpu_count=1)
    p = plan(kb, no_blocks("vllm-no-cache-blocks"), facts)
    assert p.sizing is not None and p.sizing.is_estimate
    assert not any(raises_utilization(f, facts) for f in p.fixes)
    reasons = {w.id: w.reason for w in p.withheld}
    assert "weights alone (131.41 GiB, estimated) exceed 0.95 x 79.15 GiB" in reasons[
        "t-raise-gpu-memory-utilization"]
    assert "1 GPU(s)" in reasons["raise-tensor-parallel"]  # no spare GPU on this host
    assert "lower-max-model-len" in reasons  # nothing fits: a shorter context cannot help
    causes = [c.id for c in p.causes]
    assert causes[0] in ("t-weights-too-large-for-budget", "t-tensor-parallel-too-small")
    assert "t-max-model-len-too-large" not in causes  # ruled out: weights alone are too big
    assert "kv-cache-not-fp8" not in causes
    assert "131.41 GiB" in p.causes[0].why
    # the model is named in free text: the command uses the catalog id, never "Llama 3 70B"
    assert all("Llama 3 70B" not in f.command for f in p.fixes)
    assert any("meta-llama/Meta-Llama-3-70B-Instruct" in f.command for f in p.fixes)


def test_weights_too_large_with_spare_gpus_proposes_tp(kb: KB) -> None:
    facts = Facts(engine="vllm", model="Llama 3 70B", gpu_total_gib=79.15,
                  gpu_memory_utilization=0.9, max_model_len=8192, gpu_count=4)
    p = plan(kb, no_blocks("vllm-no-cache-blocks"), facts)
    tp = by_id(p)["raise-tensor-parallel"]
    assert tp.flags == {"--tensor-parallel-size": 2}
    assert tp.predicted == "largest max-model-len becomes 8192"
    assert p.causes[0].id == "t-tensor-parallel-too-small"


def test_contradicted_cause_is_dropped(kb: KB) -> None:
    # nvidia-smi lists the server alone: nobody else holds the GPU
    facts = Facts(engine="vllm", model="Qwen/Qwen3-14B", max_model_len=32_768,
                  kv_cache_available_gib=6.51, gpu_memory_utilization=0.9, gpu_total_gib=79.19,
                  foreign_processes_gib=0.0, kv_cache_dtype="fp8",
                  processes=[GpuProcess(pid=7, used_mib=71_000, is_server=True,
                                        source="nvidia-smi")])
    p = plan(kb, no_blocks(), facts)
    ids = {c.id for c in p.causes}
    assert "t-max-model-len-too-large" not in ids  # 5.00 GiB needed fits in 6.51
    assert "t-foreign-process-holds-memory" not in ids
    assert "kv-cache-not-fp8" not in ids
    assert "fp8-kv-cache" not in {f.id for f in p.fixes}


def test_missing_facts_fall_back_and_never_crash(kb: KB) -> None:
    p = plan(kb, no_blocks(), Facts())
    fix = by_id(p)["lower-max-model-len"]
    assert fix.command == "vllm serve MODEL --max-model-len 8192"
    assert not fix.computed and fix.flags == {} and fix.predicted == ""
    assert "raise-tensor-parallel" not in by_id(p)  # no fallback: not offered
    assert all(0 < c.confidence <= 1 for c in p.causes)


def test_unrelated_problem_gets_no_memory_arithmetic(kb: KB) -> None:
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072)
    p = plan(kb, [ProblemMatch(id="t-nccl-failure", title="NCCL", confidence=0.9)], facts)
    assert p.sizing is None
    assert [c.id for c in p.causes] == ["nccl-shm-too-small"]
    assert p.causes[0].confidence == 0.4
    assert [f.id for f in p.fixes] == ["docker-shm-size"]
    assert plan(kb, [], facts) == Plan()


def test_engine_selects_templates(kb: KB) -> None:
    facts = Facts(engine="sglang", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072,
                  kv_cache_needed_gib=16.0, kv_cache_available_gib=9.97, mem_fraction_static=0.88)
    ids = {f.id for f in plan(kb, no_blocks(), facts).fixes}
    assert "sglang-context-length" in ids and "lower-max-model-len" not in ids
    assert "check-gpu-usage" in ids


def test_model_argument() -> None:
    assert model_argument("/data/models/Mistral-Large-Instruct-2407/", None) == (
        "/data/models/Mistral-Large-Instruct-2407/")
    assert model_argument("Llama 3 70B", "meta-llama/Meta-Llama-3-70B-Instruct") == (
        "meta-llama/Meta-Llama-3-70B-Instruct")
    assert model_argument(None, None) == "MODEL"


def test_formatting_rules() -> None:
    assert format_value("fit_max_model_len", 77_824) == "77824"
    assert format_value("kv_cache_available_gib", 9.9712) == "9.97"
    assert format_value("suggested_gpu_memory_utilization", 0.93) == "0.93"
    assert format_value("suggested_tensor_parallel_size", 4.0) == "4"
    assert round_length(81_664) == 80_896 and round_length(700) == 688


def test_nothing_decided_gives_one_first_step(kb: KB) -> None:
    # no fact supports any cause: two are shown as possible, and one first step is offered
    # rather than every candidate's fix
    p = plan(kb, no_blocks(), Facts())
    assert len(p.causes) == 2 and not any(c.supported for c in p.causes)
    assert [f.id for f in p.fixes] == ["lower-max-model-len"]
    assert "t-tensor-parallel-too-small" in {c.id for c in p.more_causes}


def test_a_leaning_cause_gets_the_next_hypothesis_beside_it(kb: KB) -> None:
    # utilization 0.5 leans towards one cause (0.8): the likeliest other is named as possible,
    # without a fix of its own
    p = plan(kb, no_blocks(), Facts(engine="vllm", gpu_memory_utilization=0.5))
    assert [(c.id, c.supported) for c in p.causes] == [
        ("t-gpu-memory-utilization-too-low", True), ("t-max-model-len-too-large", False)]
    assert {f.cause_id for f in p.fixes} == {"t-gpu-memory-utilization-too-low"}
    # another process holding 40 GiB decides it: that cause stands alone
    decided = plan(kb, no_blocks(), Facts(engine="vllm", processes=[
        GpuProcess(pid=4242, used_mib=40 * 1024, is_server=False, source="torch")]))
    assert [(c.id, c.supported) for c in decided.causes] == [
        ("t-foreign-process-holds-memory", True)]


def test_only_supported_causes_contribute_fixes_once_the_facts_decide(kb: KB) -> None:
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072,
                  kv_cache_needed_gib=16.0, kv_cache_available_gib=9.97)
    p = plan(kb, no_blocks(), facts)
    supported = {c.id for c in p.causes if c.confidence >= 0.5}
    assert supported and all(f.cause_id in supported for f in p.fixes)


def test_largest_gpu_bound_covers_the_catalog() -> None:
    """The utilization-raise guard assumes no GPU has more memory than LARGEST_GPU_GIB."""
    from bot.sizing.catalog import gpus
    from bot.sizing.checks import LARGEST_GPU_GIB

    assert max(g.memory_mib for g in gpus().values()) / 1024 <= LARGEST_GPU_GIB


def test_tp_fix_names_this_host_only_when_it_shows_the_gpus() -> None:
    """A 70B model on one A100: 'shard over the GPUs already in the host' is offered only when
    the host shows them; otherwise the next-larger host is, and the reason is said."""
    from bot.kb.loader import load_kb

    shipped = load_kb(use_cache=False)
    oom = [ProblemMatch(id="oom-loading-weights", title="OOM", confidence=0.9)]
    base: dict[str, Any] = dict(engine="vllm", model="meta-llama/Llama-3.1-70B-Instruct",
                                gpu_name="NVIDIA A100-SXM4-80GB", gpu_total_gib=79.15,
                                max_model_len=8192)
    def tp_fixes(p: Plan) -> list[Fix]:
        return [f for f in p.fixes if "--tensor-parallel-size" in f.flags]

    unknown = plan(shipped, oom, Facts(**base))
    assert [f.id for f in tp_fixes(unknown)] == ["add-gpus-tensor-parallel"]
    assert "on a host with at least" in tp_fixes(unknown)[0].command
    four = plan(shipped, oom, Facts(**base, gpu_count=4))
    assert len(tp_fixes(four)) == 1 and "on a host with" not in tp_fixes(four)[0].command
    assert tp_fixes(four)[0].flags["--tensor-parallel-size"] in (2, 4)
    assert "this host already has 4 GPUs" in {w.reason for w in four.withheld}.pop()


def test_an_example_value_the_server_already_runs_with_is_not_offered() -> None:
    """SGLang at --tp-size 2 with a model of unknown size: the template's example '--tp-size 2'
    would restart the server as it was; with the size known, TP 4 is offered on its command."""
    from bot.kb.loader import load_kb
    from bot.sizing.command import parse_command

    shipped = load_kb(use_cache=False)
    oom = [ProblemMatch(id="oom-loading-weights", title="OOM", confidence=0.9)]
    command = parse_command("python -m sglang.launch_server --model-path mymodels --tp-size 2 "
                            "--port 30000")
    base: dict[str, Any] = dict(engine="sglang", model="mymodels", tensor_parallel_size=2)
    # 405B on 16 GB cards: no TP size on one host fits it, so the template falls back to 2
    unknown = plan(shipped, oom, Facts(**base, model_named="Llama-3.1-405B", gpu_total_gib=15.77),
                   command=command)
    assert "tensor-parallel-too-small" in [c.id for c in unknown.causes]
    assert not [f for f in unknown.fixes if "--tp-size" in f.change]
    named = plan(shipped, oom, Facts(**base, model_named="Qwen3-32B-FP8", gpu_total_gib=15.77),
                 command=command)
    tp = [f for f in named.fixes if "--tp-size" in f.flags]
    assert tp and tp[0].flags["--tp-size"] == 4
    assert tp[0].command.startswith("python -m sglang.launch_server --model-path mymodels "
                                    "--tp-size 4 --port 30000")
