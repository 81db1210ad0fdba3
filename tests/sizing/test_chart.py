"""The chart shows the Diagnosis's own numbers, and writes a PNG that opens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.fingerprint import fingerprint
from bot.schema import Diagnosis, Facts, GpuProcess, ProblemMatch
from bot.sizing.calculators import size
from bot.sizing.chart import chart_data, write_chart
from bot.sizing.plan import plan
from tests.sizing.test_plan import KB_DIR

NO_KEY = fingerprint(None, None, None, None)


@pytest.fixture(scope="module")
def diagnosis() -> Diagnosis:
    from bot.kb.loader import load_kb

    kb = load_kb(roots=[KB_DIR], use_cache=False)
    facts = Facts(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct", gpu_name="NVIDIA L4",
                  gpu_total_gib=22.05, gpu_memory_utilization=0.9, budget_gib=19.85,
                  weights_gib=14.99, activation_peak_gib=1.2, non_torch_gib=0.1,
                  cuda_graph_gib=0.5, max_model_len=32_768,
                  processes=[GpuProcess(pid=9, name="jupyter", used_mib=1024, is_server=False)])
    problems = [ProblemMatch(id="t-kv-cache-no-blocks", title="t", confidence=0.9)]
    p = plan(kb, problems, facts)
    return Diagnosis(kb_version="t", fingerprint=NO_KEY, problems=problems, facts=facts,
                     sizing=p.sizing, causes=p.causes, fixes=p.fixes)


def test_chart_numbers_are_the_diagnosis_numbers(diagnosis: Diagnosis) -> None:
    s = diagnosis.sizing
    assert s is not None
    data = chart_data(diagnosis)
    assert data.value("weights") == s.weights_gib
    assert data.value("activation") == s.extra.activation_gib
    assert data.value("other") == s.extra.non_torch_gib
    assert data.value("kv_available") == s.kv_cache_available_gib == 3.56
    assert data.value("cuda_graphs") == s.extra.cuda_graph_gib
    assert data.value("foreign") == s.extra.foreign_processes_gib == 1.0
    assert data.value("headroom") == s.extra.headroom_gib
    assert data.kv_needed_gib == s.kv_cache_needed_gib == 4.0
    assert data.budget_gib == s.budget_gib and data.total_gib == s.extra.gpu_total_gib
    # the segments add up to the GPU: budget + graphs + other processes + headroom
    assert sum(seg.gib for seg in data.segments) == pytest.approx(22.05, abs=0.01)


def test_chart_from_a_log_only_budget_uses_non_kv() -> None:
    s_facts = Facts(engine="vllm", model="Qwen/Qwen3-14B", kv_cache_available_gib=6.51,
                    gpu_total_gib=79.19, gpu_memory_utilization=0.9, weights_gib=27.52)
    from bot.sizing.budget import compute_sizing

    d = Diagnosis(kb_version="t", fingerprint=NO_KEY, facts=s_facts, sizing=compute_sizing(s_facts))
    data = chart_data(d)
    assert d.sizing is not None and d.sizing.extra.non_kv_gib is not None
    assert data.value("other") == pytest.approx(d.sizing.extra.non_kv_gib - 27.52)


def test_chart_needs_sizing() -> None:
    with pytest.raises(ValueError, match="no memory arithmetic"):
        chart_data(Diagnosis(kb_version="t", fingerprint=NO_KEY))


def test_chart_from_size_report() -> None:
    r = size("llama-3.1-8b", "RTX 4090", max_model_len=16_384, concurrency=2)
    data = chart_data(r)
    assert data.value("weights") == r.memory.weights_gib
    assert data.value("kv_available") == r.memory.kv_available_gib
    assert data.kv_needed_gib == r.memory.kv_per_batch_gib
    assert data.total_gib == r.deployment.gpu_memory_gib


@pytest.mark.slow
def test_png_is_written_and_opens(diagnosis: Diagnosis, tmp_path: Path) -> None:
    from matplotlib import image

    out = tmp_path / "budget.png"
    write_chart(chart_data(diagnosis), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(str(out)).shape[0] > 100


def test_sizing_does_not_import_matplotlib() -> None:
    code = ("import sys, bot.sizing.plan, bot.sizing.chart, bot.sizing.calculators; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _kb_diagnosis(problem: str, index: int = 0) -> Diagnosis:
    from bot.diagnose import diagnose
    from bot.kb.loader import load_kb
    from bot.schema import Evidence

    kb = load_kb()
    return diagnose(Evidence(text=kb.examples[problem].match[index].text), kb)


@pytest.mark.parametrize("text", [
    "torch.OutOfMemoryError: CUDA out of memory.",  # a bare OOM line: no numbers
])
def test_no_chart_for_a_bare_oom_line(text: str) -> None:
    from bot.diagnose import diagnose
    from bot.kb.loader import load_kb
    from bot.schema import Evidence
    from bot.sizing.chart import chart_png

    d = diagnose(Evidence(text=text), load_kb())
    assert d.problems and chart_png(d) is None


@pytest.mark.parametrize("problem", ["kv-cache-preemption", "low-throughput"])
def test_no_chart_where_the_numbers_cannot_tell_a_story(problem: str) -> None:
    from bot.sizing.chart import chart_png

    assert chart_png(_kb_diagnosis(problem)) is None


def test_bars_never_exceed_the_gpu_s_total_and_each_chart_has_its_sentence() -> None:
    from bot.kb.loader import load_kb

    kb = load_kb()
    drawn = 0
    for problem, examples in kb.examples.items():
        for i in range(len(examples.match)):
            try:
                data = chart_data(_kb_diagnosis(problem, i))
            except (ValueError, KeyError):
                continue
            drawn += 1
            assert data.sentence, problem
            if data.total_gib is not None:
                used = sum(max(s.gib, 0.0) for s in data.segments)
                assert used <= data.total_gib + 0.01, (problem, i, used, data.total_gib)
    assert drawn >= 5


def test_other_processes_are_not_counted_twice(diagnosis: Diagnosis) -> None:
    import dataclasses

    s = diagnosis.sizing
    assert s is not None
    # other processes already inside the budget's non-torch memory (vLLM 0.8+): over the total
    crowded = dataclasses.replace(s, extra=dataclasses.replace(
        s.extra, foreign_processes_gib=8.0))
    data = chart_data(dataclasses.replace(diagnosis, sizing=crowded))
    assert sum(seg.gib for seg in data.segments) <= 22.05 + 0.01


def test_an_oom_chart_draws_the_failing_allocation() -> None:
    from bot.sizing.chart import chart_data as data_of

    d = Diagnosis(kb_version="t", fingerprint=NO_KEY, facts=Facts(
        gpu_total_gib=79.1, oom_tried_to_allocate_gib=2.0, oom_free_gib=1.0,
        oom_reserved_gib=60.0, processes=[GpuProcess(pid=4242, name="python",
                                                     used_mib=16_000, is_server=False)]))
    data = data_of(d)
    assert [s.label for s in data.segments] == ["this process (PyTorch)", "pid 4242 python",
                                                "free"]
    assert (data.kv_needed_gib, data.kv_available_gib) == (2.0, 1.0)
    assert data.sentence.startswith("It tried to allocate 2.00 GiB with 1.00 GiB free")


def test_the_chart_shows_the_kv_after_fix_1(diagnosis: Diagnosis) -> None:
    import dataclasses

    from bot.schema import Fix

    fix = Fix(id="f", title="t", command="vllm serve m --max-model-len 16384",
              flags={"--max-model-len": 16_384})
    data = chart_data(dataclasses.replace(diagnosis, fixes=[fix]))
    assert data.after_fix == ("after fix 1 (16,384 tokens)", 2.0)  # half the length, half KV
    assert "after fix 1 it needs 2.00 GiB" in data.sentence
