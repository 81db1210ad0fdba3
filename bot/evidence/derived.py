"""Facts that combine what several sources read, computed once everything has been seen.

Runs last. Each derivation fills a fact only when the text did not print it: a printed figure
always beats an arithmetic one.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from bot.evidence.base import FactSink, Line
from bot.lazyre import lazy

# The server never got to serve: whatever holds GPU memory in the paste is someone else.
STARTUP_FAILURES = (
    "on startup is less than desired", "Engine core initialization failed",
    "EngineCore failed to start", "To serve at least one request",
    "No available memory for the cache blocks", "Error in memory profiling",
    "Not enough memory", "ShardCannotStart", "Unable to warmup model", "stored in KV cache",
)
CUDA_BLOCK_SIZE = 16  # vLLM's default on CUDA/ROCm when --block-size is not given
# vLLM's engine config names the platform; others use other block sizes (HPU 128, neuron:
# max_model_len).
_DEVICE = lazy(r"device_config=(?:device\(type=)?'?(?P<device>\w{1,16})")


class DerivedFacts:
    name: ClassVar[str] = "derived"
    anchors: ClassVar[tuple[str, ...]] = (*STARTUP_FAILURES, "device_config=")
    follow: ClassVar[int] = 0

    def __init__(self) -> None:
        self._startup_failed = False
        self._not_cuda = False

    def feed(self, line: Line, sink: FactSink) -> None:
        text = line.text
        self._startup_failed = self._startup_failed or any(s in text for s in STARTUP_FAILURES)
        if "device_config=" in text and (m := _DEVICE.search(text)):
            self._not_cuda = m.group("device") not in ("cuda", "rocm")

    def finish(self, sink: FactSink) -> None:
        self._foreign(sink)
        self._used_before_start(sink)
        blocks = sink.get("gpu_blocks")
        block_size = sink.get("block_size") or (None if self._not_cuda else CUDA_BLOCK_SIZE)
        if blocks is not None and block_size is not None:
            sink.set_default("kv_cache_tokens", blocks * block_size,
                             sink.line_of("gpu_blocks") or 0)
        # "Maximum concurrency for N tokens per request" divides by max_model_len.
        tokens = sink.get("concurrency_tokens")
        if tokens is not None:
            sink.set_default("max_model_len", tokens, sink.line_of("concurrency_tokens") or 0)

    @staticmethod
    def _used_before_start(sink: FactSink) -> None:
        """Memory taken before this server allocated anything: V1's start-up check prints the
        free memory it found; V0 (~0.6.4) printed the usage when profiling began, weights
        included."""
        total, free = sink.get("gpu_total_gib"), sink.get("free_memory_gib")
        if total is not None and free is not None:
            sink.set_default("used_before_start_gib", round(max(0.0, total - free), 2),
                             sink.line_of("free_memory_gib") or 0)
            return
        start, weights = sink.get("profile_start_used_gib"), sink.get("weights_gib")
        if start is not None and weights is not None:
            sink.set_default("used_before_start_gib", round(max(0.0, start - weights), 2),
                             sink.line_of("profile_start_used_gib") or 0)

    def _foreign(self, sink: FactSink) -> None:
        if self._startup_failed:
            # A table read while the server was failing to start shows what was there before
            # it; torch's lines were told apart where they were read.
            for key, proc in sink.processes.items():
                if proc.source != "torch":
                    sink.processes[key] = dataclasses.replace(proc, is_server=False)
        procs = list(sink.processes.values())
        # Once the server is recognised, a bare `python` next to it is someone else's; with no
        # server recognised, only programs that are certainly not it are counted.
        server_seen = any(p.is_server for p in procs)
        foreign = [p for p in procs
                   if p.is_server is False or (server_seen and p.is_server is None)]
        if foreign or server_seen:
            sink.set("foreign_processes_gib", sum(p.used_mib or 0.0 for p in foreign) / 1024)
