"""A busy inference server's log, generated: the input the scanner must read at grep's speed.

A vLLM server under load prints, for every request, the request itself (prompt and sampling
parameters), "Added request" and an access line; every few seconds a metrics line; under KV
pressure a warning per preempted request; at DEBUG level, its engine loop's chatter. All of
these carry a scanner anchor. `density` is the fraction of lines that do; the others are lines
no anchor is in (a sidecar's and a proxy's records, as a pod's combined log has them). The log
starts as the server started and ends with the error that stopped it.

Line shapes are the servers' own (vLLM V1 loggers.py, V0 metrics.py and scheduler.py,
logger.py, async_llm.py, uvicorn, SGLang's scheduler); the numbers move as a loaded server's
do: KV usage climbs and falls, requests queue, the preemption count only grows. A few prompts
name GPUs, models or flags, as people's do. Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[2]
FATAL = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
# The example's start-up lines open the log; its error ends it.
HEAD = "".join(FATAL.splitlines(keepends=True)[:5])
TAIL = "".join(FATAL.splitlines(keepends=True)[5:])

API = "(APIServer pid=3646) "
CORE = "(EngineCore_DP0 pid=3771) "
PROMPTS = (
    "Summarise the following document in three sentences.",
    "Translate to French: the meeting moved to Thursday.",
    "Write a haiku about autumn rain.",
    "You are a helpful assistant. Answer briefly: what is 17 * 23?",
    # what people ask a model, anchors and all
    "Which GPU should I buy to run Llama 3 70B, an A100 or two RTX 4090 cards?",
    "Explain why my job fails with CUDA out of memory when --max-model-len is 32768.",
)
SAMPLING = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
            "repetition_penalty=1.0, temperature={t}, top_p=1.0, top_k=-1, min_p=0.0, "
            "seed=None, stop=[], stop_token_ids=[], bad_words=[], "
            "include_stop_str_in_output=False, ignore_eos=False, max_tokens={m}, "
            "min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
            "spaces_between_special_tokens=True, truncate_prompt_tokens=None, "
            "guided_decoding=None, extra_args=None)")
# Lines no anchor is in (small numbers: "080" or "137" in a long one would be an anchor).
FILLER = (
    "2026-11-18 18:{m:02d}:{s:02d},{q:02d} INFO sidecar: heartbeat ok seq={q} "
    "upstream=10.0.3.7:8000 healthy=true",
    '10.0.3.{p} - - [18/Nov/2026:18:{m:02d}:{s:02d} +0000] "GET /health HTTP/1.1" 200 2 "-" '
    '"kube-probe/1.29"',
    "2026-11-18 18:{m:02d}:{s:02d},{q:02d} DEBUG auth: key ok for tenant-{p} "
    "route=/v1/chat/completions in {q} ms",
    '10.0.3.{p} - - [18/Nov/2026:18:{m:02d}:{s:02d} +0000] "GET /metrics HTTP/1.1" 200 '
    '{q}31 "-" "Prometheus/2.51.0"',
)
# Anchored lines: how often each shape comes, among them (a V1 server, with a V0 scheduler's
# preemption warnings, which V1 no longer prints one by one).
MIX: Mapping[str, float] = {"received": 0.22, "added": 0.22, "access": 0.22, "metrics": 0.12,
                            "core": 0.12, "preempted": 0.10}
# Every shape the scanner folds, for tests.
EVERY_SHAPE: Mapping[str, float] = {
    "received": 0.15, "added": 0.15, "aborted": 0.03, "access": 0.15, "metrics": 0.1,
    "metrics_dp": 0.04, "metrics_v0": 0.08, "core": 0.1, "preempted": 0.08, "decode": 0.06,
    "decode_v2": 0.03, "prefill": 0.03}


class _Server:
    """A loaded server's state, stepping line by line."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.usage = 20.0
        self.running = 12
        self.waiting = 0
        self.preemptions = 0
        self.req = 0

    def step(self) -> None:
        rng = self.rng
        self.usage = min(100.0, max(0.0, self.usage + rng.uniform(-6.0, 6.5)))
        self.running = max(0, min(256, self.running + rng.randint(-3, 3)))
        self.waiting = max(0, self.waiting + rng.randint(-2, 2)) if self.usage > 85 else 0

    def throughput(self) -> tuple[float, float]:
        rng = self.rng
        prompt = 0.0 if rng.random() < 0.2 else rng.uniform(100.0, 30000.0)
        return prompt, rng.uniform(0.0, 4000.0) if rng.random() > 0.05 else 0.0

    def request_id(self, new: bool = False) -> str:
        self.req += new
        return f"chatcmpl-{self.rng.getrandbits(128) if new else self.req * 7919:032x}"


def _anchored(kind: str, server: _Server, i: int, stamp: str) -> str:
    rng = server.rng
    if kind in ("metrics", "metrics_dp", "metrics_v0", "decode", "decode_v2", "prefill"):
        server.step()
    prompt, generation = server.throughput()
    if kind in ("metrics", "metrics_dp"):
        engine = "000" if kind == "metrics" else f"{1 + i % 3:03d}"
        return (f"{API}INFO {stamp} [loggers.py:123] Engine {engine}: Avg prompt throughput: "
                f"{prompt:.1f} tokens/s, Avg generation throughput: {generation:.1f} tokens/s, "
                f"Running: {server.running} reqs, Waiting: {server.waiting} reqs, "
                f"GPU KV cache usage: {server.usage:.1f}%, "
                f"Prefix cache hit rate: {rng.uniform(0.0, 60.0):.1f}%")
    if kind == "metrics_v0":
        return (f"INFO {stamp} metrics.py:349] Avg prompt throughput: {prompt:.1f} tokens/s, "
                f"Avg generation throughput: {generation:.1f} tokens/s, Running: "
                f"{server.running} reqs, Swapped: 0 reqs, Pending: {server.waiting} reqs, GPU KV "
                f"cache usage: {server.usage:.1f}%, CPU KV cache usage: 0.0%.")
    if kind in ("decode", "decode_v2", "prefill"):
        when = f"[2026-11-18 {stamp[6:]} TP0] "
        usage = f"{server.usage / 100:.2f}"
        if kind == "prefill":
            return (f"{when}Prefill batch. #new-seq: {1 + i % 4}, #new-token: {i % 900}, "
                    f"#cached-token: {i % 300}, token usage: {usage}, #running-req: "
                    f"{server.running}, #queue-req: {server.waiting}")
        sep = "." if kind == "decode" else ","
        return (f"{when}Decode batch{sep} #running-req: {server.running}, #token: {i % 99999}, "
                f"token usage: {usage}, cuda graph: True, gen throughput (token/s): "
                f"{generation:.2f}, #queue-req: {server.waiting},")
    if kind == "received":
        text = PROMPTS[rng.randrange(len(PROMPTS)) if rng.random() < 0.05 else i % 4]
        params = SAMPLING.format(t=rng.choice((0.0, 0.7, 1.0)), m=rng.choice((256, 512)))
        return (f"{API}INFO {stamp} [logger.py:43] Received request "
                f"{server.request_id(new=True)}: prompt: '{text}', params: {params}, "
                "prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.")
    if kind in ("added", "aborted"):
        what = "Added" if kind == "added" else "Aborted"
        return f"{API}INFO {stamp} [async_llm.py:269] {what} request {server.request_id()}."
    if kind == "access":
        return (f"{API}INFO:     10.0.{i % 250}.{(i // 250) % 250}:{40000 + i % 20000} - "
                '"POST /v1/chat/completions HTTP/1.1" 200 OK')
    if kind == "core":
        what = "EngineCore loop active." if i % 2 else "EngineCore waiting for work."
        return f"{CORE}DEBUG {stamp} [core.py:745] {what}"
    server.preemptions += 1
    return (f"WARNING {stamp} [scheduler.py:1560] Sequence group {server.request_id()} is "
            "preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
            "space. This can affect the end-to-end performance. Increase "
            "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            f"total_num_cumulative_preemption={server.preemptions}")


def lines(count: int, density: float, seed: int = 0, mix: Mapping[str, float] = MIX
          ) -> Iterator[str]:
    """`count` lines of a server under load, `density` of them anchored, without newlines."""
    server = _Server(seed)
    kinds, weights = list(mix), list(mix.values())
    owed = 0.0
    for i in range(count):
        m, s = (i // 6000) % 60, (i // 100) % 60
        owed += density
        if owed < 1.0:
            yield FILLER[i % len(FILLER)].format(m=m, s=s, q=i % 100, p=i % 7)
            continue
        owed -= 1.0
        kind = server.rng.choices(kinds, weights)[0]
        yield _anchored(kind, server, i, f"11-18 18:{m:02d}:{s:02d}")


def write(out: TextIO, size: int, density: float, seed: int = 0,
          mix: Mapping[str, float] = MIX) -> None:
    """About `size` bytes: the server's start-up, lines under load, the error that ends it."""
    out.write(HEAD)
    written = len(HEAD) + len(TAIL)
    for line in lines(1 << 62, density, seed, mix):
        if written >= size:
            break
        out.write(line + "\n")
        written += len(line) + 1
    out.write(TAIL)


def text(size: int, density: float, seed: int = 0, mix: Mapping[str, float] = MIX) -> str:
    import io

    out = io.StringIO()
    write(out, size, density, seed, mix)
    return out.getvalue()
