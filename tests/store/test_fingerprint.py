"""The fingerprint helper: same failure, same digest; different host or problem, different."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bot.fingerprint import fingerprint, mask_line

LINE_A = (
    "INFO 11-30 06:03:16 [core.py:88] (VllmWorker rank=0 pid=4242) ValueError: "
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)
LINE_B = (
    "INFO 12-01 23:59:01 [core.py:88] (VllmWorker rank=0 pid=777) ValueError: "
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)


def test_same_paste_with_other_timestamps_and_pids_is_the_same_fingerprint() -> None:
    a = fingerprint("kv-cache-no-blocks", LINE_A, "gpu-1", "meta-llama/Llama-3.1-8B")
    b = fingerprint("kv-cache-no-blocks", LINE_B, "GPU-1 ", "Meta-Llama/Llama-3.1-8B")
    assert a == b
    assert len(a.digest) == 32


def test_parts_say_what_was_hashed() -> None:
    assert fingerprint("kv-cache-no-blocks", LINE_A, "gpu-1", "m").parts() == {
        "problem": "kv-cache-no-blocks",
        "signature": "INFO <ts> [core.py:<n>] (VllmWorker rank=<n> pid=<pid>) ValueError: "
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        "host": "gpu-1",
        "model": "m",
    }


def test_host_problem_and_model_each_separate_incidents() -> None:
    base = fingerprint("kv-cache-no-blocks", LINE_A, "gpu-1", "m").digest
    assert fingerprint("kv-cache-no-blocks", LINE_A, "gpu-2", "m").digest != base
    assert fingerprint("oom-under-load", LINE_A, "gpu-1", "m").digest != base
    assert fingerprint("kv-cache-no-blocks", LINE_A, "gpu-1", "other").digest != base
    assert fingerprint("kv-cache-no-blocks", "NCCL error", "gpu-1", "m").digest != base


def test_unknowns_are_empty_not_none() -> None:
    key = fingerprint(None, None, None, None)
    assert key.parts() == {"problem": "", "signature": "", "host": "", "model": ""}
    assert key == fingerprint("", "", "", "")


def test_masks_every_varying_token() -> None:
    line = (
        "2026-11-30T06:03:16.123Z req 3f2a9c1e-1234-4abc-9def-0123456789ab in "
        "/tmp/vllm-8812/worker.py container 4f8a9b2c3d1e ptr 0x7f3a2b Process 991 "
        "has 78.00 GiB; Nov 30 06:03:16 at 06:03:16.5"
    )
    assert mask_line(line) == (
        "<ts> req <uuid> in <path> container <hex> ptr <hex> Process <pid> has <n> GiB; "
        "<ts> at <ts>"
    )


def test_model_ids_and_counters_are_not_paths() -> None:
    assert mask_line("loading meta-llama/Llama-3.1-8B shards 8/8") == (
        "loading meta-llama/Llama-<n>-<n>B shards <n>/<n>"
    )


def test_hostile_input_is_bounded_and_fast() -> None:
    hostile = "0" * 2_000_000 + "/a" * 500_000 + "-" * 100_000
    started = time.perf_counter()
    key = fingerprint("p", hostile, "h", "m")
    assert time.perf_counter() - started < 1.0
    assert len(key.signature) <= 1000


def test_start_up_path_imports_no_sqlalchemy() -> None:
    """`inferbot diagnose` imports config, fingerprint and the store package before answering."""
    code = (
        "import sys, bot.config, bot.fingerprint, bot.store, bot.store.views, bot.store.spool\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic'))\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
