"""Text as it really arrives: Slack entities and fences, CRLF, ANSI colours, huge lines, bytes;
and the rule that every pattern runs in linear time."""

from __future__ import annotations

import time
from types import ModuleType

import pytest

from bot.evidence import (
    derived,
    extract_facts,
    flags,
    mentions,
    nvidia_smi,
    redact,
    sglang,
    tgi,
    torch,
    units,
    vllm,
)
from bot.evidence.rules import Rules
from bot.kb.safety import check_linear
from bot.lazyre import LazyPattern

V1_ERROR = ("ValueError: To serve at least one request with the model's max seq len (262144), "
            "(24.0 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(3.18 GiB). Based on the available memory, the estimated maximum model length is "
            "34736.")


def test_slack_entities_fences_and_crlf() -> None:
    text = ("```\r\n$ vllm serve org/model --max-model-len 8192 &gt; log.txt 2&gt;&amp;1\r\n"
            "[rank0]:   File \"&lt;frozen runpy&gt;\", line 198\r\n"
            f"{V1_ERROR}```\r\n")
    facts = extract_facts(text)
    assert (facts.model, facts.max_model_len) == ("org/model", 262144)
    assert facts.kv_cache_available_gib == 3.18
    assert facts.estimated_max_model_len == 34736


def test_ansi_colours() -> None:
    text = ("\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m 08-01 "
            "[gpu_worker.py:1] Available KV cache memory: \x1b[1m9.97\x1b[0m GiB\n"
            "\x1b[31mERROR\x1b[0m GPU KV cache size: \x1b[1m42,656\x1b[0m tokens\n")
    facts = extract_facts(text)
    assert facts.kv_cache_available_gib == 9.97
    assert facts.kv_cache_tokens == 42656


def test_bytes_input_and_progress_bar_rewrites() -> None:
    raw = (b"Loading safetensors: 10%\rLoading safetensors: 100%\r\n"
           b"Model loading took 14.99 GiB and 3.2 seconds\n\xff\xfe broken utf-8\n")
    assert extract_facts(raw).weights_gib == 14.99


@pytest.mark.slow
def test_ten_megabyte_line_with_an_error_in_the_middle() -> None:
    # Noise full of other extractors' anchors, so the window must be per extractor.
    noise = "x --flag GPU MiB Qwen " * (5 * 1024 * 1024 // 22)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 6 has a "
           "total capacity of 44.53 GiB of which 448.00 KiB is free.")
    text = noise + oom + noise
    assert len(text) > 10 * 1024 * 1024
    start = time.perf_counter()
    facts = extract_facts(text)
    assert time.perf_counter() - start < 10
    assert facts.oom_tried_to_allocate_gib == pytest.approx(2 / 1024)
    assert facts.oom_gpu_index == 6


def test_hostile_lines_are_fast() -> None:
    hostile = "\n".join([
        "9" * 16000, "-" * 16000, ", " * 8000, "| " * 8000, "=" * 16000, "'" * 16000,
        "--a " * 4000, "vllm serve " + '"' * 16000, "LLM(" + "a=" * 8000,
        "non-default args: {" + "{" * 16000, "Tried to allocate " + "1" * 16000,
        "GPU " + "A100 " * 3000, "https://" + "a:" * 8000, "Bearer " + "a" * 16000,
        "_TOKEN=" + "x" * 16000, "sk-" + "a" * 16000, "api_key=" + "'" * 16000,
    ])
    start = time.perf_counter()
    extract_facts(hostile)
    redact(hostile)
    assert time.perf_counter() - start < 5


MODULES: list[ModuleType] = [vllm, flags, sglang, tgi, torch, nvidia_smi, mentions, derived, units]


def _patterns() -> list[tuple[str, str]]:
    import bot.evidence.redact as redact_module

    out = []
    for module in [*MODULES, redact_module]:
        for name, value in vars(module).items():
            if isinstance(value, LazyPattern):
                out.append((f"{module.__name__}.{name}", value.pattern))
            elif isinstance(value, tuple | Rules):
                for item in value:
                    pattern = getattr(item, "pattern", None)
                    if isinstance(pattern, LazyPattern):
                        out.append((f"{module.__name__}.{name}", pattern.pattern))
                    elif isinstance(item, tuple) and any(isinstance(i, LazyPattern)
                                                         for i in item):
                        out += [(f"{module.__name__}.{name}", i.pattern) for i in item
                                if isinstance(i, LazyPattern)]
    return out


@pytest.mark.parametrize(("where", "pattern"), _patterns(), ids=lambda v: str(v)[:40])
def test_patterns_are_linear(where: str, pattern: str) -> None:
    check_linear(pattern)


def test_every_extractor_module_has_patterns_checked() -> None:
    checked = {where.rsplit(".", 1)[0] for where, _ in _patterns()}
    assert {m.__name__ for m in MODULES if m not in (derived, units)} <= checked
