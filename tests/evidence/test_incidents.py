"""Every figure of the dev incidents (tests/data/dev_incidents.jsonl) that has a Facts field is
read from the incident's text. Where the record lists several values (two OOMs, two attempts),
the fact must be one of them: e.g. vllm-19125's second utilization (0.8) is only in prose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.evidence import extract_facts
from bot.schema import Facts

DATA = Path(__file__).parents[1] / "data" / "dev_incidents.jsonl"
INCIDENTS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]

GIB_PER = {"GiB": 1.0, "GB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 2**20, "bytes": 1 / 2**30}


def _num(value: str) -> tuple[float, str]:
    number, unit = value.split()
    return float(number), unit


# incident key -> (fact, how the number is stated in the incident record)
KEY_TO_FACT: dict[str, tuple[str, str]] = {
    "max_model_len": ("max_model_len", "="),
    "kv_needed_GiB": ("kv_cache_needed_gib", "="),
    "kv_available_GiB": ("kv_cache_available_gib", "="),
    "total_num_cumulative_preemption": ("preemptions", "="),
    "kv_cache_tokens": ("kv_cache_tokens", "="),
    "gpu_count": ("gpu_count", "="),
    "gpu_memory_GB": ("gpu_total_gib", "="),
    "gpu_total_GiB": ("gpu_total_gib", "="),
    "free_GiB": ("oom_free_gib", "="),
    "tried_to_allocate_GiB": ("oom_tried_to_allocate_gib", "="),
    "tried_to_allocate_MiB": ("oom_tried_to_allocate_gib", "MiB"),
    # "this process has" (the server), or the "Process N has" line torch printed
    "process_in_use_GiB": ("in_use", "="),
    "mem_fraction_static": ("mem_fraction_static", "="),
    "tensor_parallel_size": ("tensor_parallel_size", "="),
    "free_MiB": ("oom_free_gib", "MiB"),
    "max_input_length": ("max_input_length", "="),
    "max_total_tokens": ("max_total_tokens", "="),
    "max_batch_prefill_tokens": ("max_batch_prefill_tokens", "="),
    "driver": ("driver_version", "="),
    "cuda": ("cuda_version", "="),
    "compute_cap": ("compute_capability", "="),
    "compute_capability": ("compute_capability", "="),
    "allocated_GiB": ("oom_allocated_gib", "="),
    "requested_GiB": ("oom_tried_to_allocate_gib", "="),
    "device_limit_GiB": ("gpu_total_gib", "="),
    "total_gpu_memory_GiB": ("gpu_total_gib", "="),
    "gpu_memory_utilization": ("gpu_memory_utilization", "="),
    "budget_GiB": ("budget_gib", "="),
    "weights_GiB": ("weights_gib", "="),
    "non_torch_GiB": ("non_torch_gib", "="),
    "activation_peak_GiB": ("activation_peak_gib", "="),
    "kv_cache_GiB": ("kv_cache_available_gib", "="),
    "gpu_blocks": ("gpu_blocks", "="),
    "cpu_blocks": ("cpu_blocks", "="),
    "gpu_total_MiB": ("gpu_total_gib", "MiB"),
    "free_at_oom": ("oom_free_gib", "unit"),
    "tried_to_allocate": ("oom_tried_to_allocate_gib", "unit"),
    "gpu_index": ("oom_gpu_index", "="),
    "total_GiB": ("gpu_total_gib", "="),
    "estimated_max_model_len": ("estimated_max_model_len", "="),
    "pipeline_parallel_size": ("pipeline_parallel_size", "="),
    "free_bytes": ("oom_free_gib", "="),
    "quantization": ("quantization", "="),
    "dtype": ("dtype", "="),
    "running": ("running_requests", "="),
    "pending": ("waiting_requests", "="),
    "gpu_kv_usage_pct": ("gpu_kv_cache_usage_pct", "max"),
    "gpu_used_before_MiB": ("gpu_used_gib", "MiB"),
    "used_before_second_MiB": ("gpu_used_gib", "MiB"),
    "memory_used_MiB": ("gpu_used_gib", "MiB"),
    "memory_total_MiB": ("gpu_total_gib", "MiB"),
}
# The startup check's two figures are the device's, not an OOM's.
STARTUP_CHECK = {"free_GiB": ("free_memory_gib", "="),
                 "requested_GiB": ("requested_memory_gib", "=")}


def expected_pairs() -> list[tuple[str, str, str, Any]]:
    out = []
    for inc in INCIDENTS:
        startup = "on startup is less than desired" in inc["text"]
        for key, value in inc["numbers"].items():
            mapping = (STARTUP_CHECK if startup else {}).get(key) or KEY_TO_FACT.get(key)
            if mapping is None:
                continue  # model names as prose, pstate, sequence ids...: no Facts field
            out.append((inc["id"], key, mapping[0] + ":" + mapping[1], value))
    return out


def _matches(got: Any, how: str, value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    if how == "max":
        return bool(got == pytest.approx(max(values)))
    candidates = []
    for v in values:
        if how == "MiB":
            candidates.append(v / 1024)
        elif how == "unit":
            number, unit = _num(v)
            candidates.append(number * GIB_PER[unit])
        else:
            candidates.append(v)
    return any(got == (pytest.approx(c) if isinstance(c, float) else c) for c in candidates)


def _facts(incident_id: str) -> Facts:
    inc = next(i for i in INCIDENTS if i["id"] == incident_id)
    return extract_facts(inc["text"])


@pytest.mark.parametrize(("incident", "key", "target", "value"), expected_pairs(),
                         ids=[f"{p[0]}:{p[1]}" for p in expected_pairs()])
def test_incident_figure(incident: str, key: str, target: str, value: Any) -> None:
    fact, how = target.split(":")
    facts = _facts(incident)
    if fact == "in_use":
        listed = [p.used_mib / 1024 for p in facts.processes if p.used_mib]
        got = facts.oom_process_in_use_gib or (max(listed) if listed else None)
    else:
        got = getattr(facts, fact)
    if isinstance(value, list) and how == "=":
        assert got in value, (fact, got)
        return
    assert _matches(got, how, value), (fact, got, value)


def test_incident_models_come_from_the_text() -> None:
    models = {i: _facts(i).model for i in (
        "tgi-1374", "vllm-19125", "vllm-2856", "vllm-34076", "vllm-42049", "vllm-5711",
        "vllm-7800")}
    assert models == {
        "tgi-1374": "codellama/CodeLlama-34b-Instruct-hf",
        "vllm-19125": "Qwen/Qwen2.5-0.5B-Instruct",
        "vllm-2856": "TheBloke/Llama-2-70B-AWQ",
        "vllm-34076": "./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        "vllm-42049": "/home/sinoma/models/google/gemma-4-31B-it",
        "vllm-5711": "Llama 3 70B",
        "vllm-7800": "/data/models/Mistral-Large-Instruct-2407",
    }


def test_incident_engines() -> None:
    engines = {i["id"]: extract_facts(i["text"]).engine for i in INCIDENTS}
    assert engines["srt-slurm-172"] == "sglang"
    assert {engines[i] for i in ("tgi-1374", "tgi-563")} == {"tgi"}
    assert {engines[i] for i in ("vllm-13882", "vllm-20305", "vllm-34076", "limo-29")} == {"vllm"}
    assert extract_facts(INCIDENTS[18]["text"]).engine_generation == "V1"


def test_incident_gpu_names() -> None:
    names = {i: _facts(i).gpu_name for i in ("vllm-946", "vllm-5711", "vllm-2856", "vllm-16141-smi",
                                             "llamafactory-7234")}
    assert names == {"vllm-946": "Tesla V100-SXM2-32GB", "vllm-5711": "A100", "vllm-2856": "A10G",
                     "vllm-16141-smi": "NVIDIA RTX A6000",
                     "llamafactory-7234": "NVIDIA GeForce RTX 4090"}


def test_incident_gpu_rows() -> None:
    assert _facts("vllm-16141-smi").gpus[0].utilization_pct == 0
    assert _facts("tgi-2238-smi").gpus[0].free_mib == 48668
    assert _facts("vllm-4327").compute_capability == "8.6"  # "Current capability: 86"
