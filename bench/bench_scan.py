"""Scan speed and memory on a large vLLM log, against grep in the same run.

Generates a log from real vLLM line shapes (request chatter, periodic metrics, the start-up
memory lines, and the fatal error near the end), then measures:
  - inferbot's whole diagnosis of the file (in-process, stream read in chunks): MB/s;
  - `grep -E -c -f` with the KB's signatures translated to ERE, on the same file;
  - peak RSS of `inferbot diagnose --no-store` on the file and on a quarter of it (flat?);
  - the slowest KB pattern on 1 MB adversarial input.
Usage: python bench/bench_scan.py [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.diagnose import diagnose  # noqa: E402
from bot.kb.loader import load_kb  # noqa: E402
from bot.kb.match import CompiledKB  # noqa: E402
from bot.schema import Evidence  # noqa: E402

CHATTER = [
    "INFO 11-18 18:{m:02d}:{s:02d} [logger.py:43] Received request chatcmpl-{i:032x}: "
    "prompt: 'Summarise the following document in three sentences.', params: "
    "SamplingParams(n=1, temperature=0.7, top_p=1.0, max_tokens=512), prompt_token_ids: None",
    "INFO:     10.0.{a}.{b}:5{i:04d} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "INFO 11-18 18:{m:02d}:{s:02d} [async_llm.py:261] Added request chatcmpl-{i:032x}.",
    "INFO 11-18 18:{m:02d}:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: "
    "1843.2 tokens/s, Avg generation throughput: 912.4 tokens/s, Running: 37 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 41.3%, Prefix cache hit rate: 12.5%",
    "DEBUG 11-18 18:{m:02d}:{s:02d} [core.py:412] EngineCore loop active.",
]
TAIL = (ROOT / "examples" / "vllm-max-model-len.log").read_text()


# vLLM logs a metrics line every VLLM_LOG_STATS_INTERVAL (10 s) and several lines per request;
# at ~10 requests/s that is one metrics line in ~300. The other shapes take turns.
METRICS_EVERY = 300
METRICS = 3


def generate(path: Path, mb: int) -> None:
    target = mb << 20
    written = 0
    i = 0
    others = [k for k in range(len(CHATTER)) if k != METRICS]
    with path.open("w") as fh:
        while written < target - len(TAIL):
            shape = METRICS if i % METRICS_EVERY == 0 else others[i % len(others)]
            line = CHATTER[shape].format(m=(i // 60) % 60, s=i % 60, i=i,
                                         a=i % 250, b=(i // 250) % 250) + "\n"
            fh.write(line)
            written += len(line)
            i += 1
        fh.write(TAIL)


def to_ere(pattern: str) -> str | None:
    """Python regex -> POSIX ERE for grep -E, or None where ERE has no equivalent."""
    if "(?=" in pattern or "(?!" in pattern or "(?<" in pattern:
        return None
    out = pattern.replace("(?:", "(").replace(r"\d", "[0-9]").replace(r"\s", "[[:space:]]")
    out = out.replace(r"\S", "[^[:space:]]").replace(r"\w", "[[:alnum:]_]")
    return out


def time_it(fn: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


PEAK_RSS = """
import contextlib, io, sys
from bot.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
# VmHWM is the peak of this process image (reset at exec); ru_maxrss would carry the
# parent's peak across fork+exec
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")))
"""


def peak_rss_mb(path: Path) -> float:
    out = subprocess.run([sys.executable, "-c", PEAK_RSS, "diagnose", str(path), "--no-store"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    args = ap.parse_args()
    kb = load_kb()
    compiled = CompiledKB(kb)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm.log"
        small = Path(tmp) / "vllm-small.log"
        generate(log, args.mb)
        generate(small, max(1, args.mb // 4))
        size = log.stat().st_size
        log.read_bytes()  # warm the page cache for both readers

        def ours() -> None:
            with log.open("rb") as fh:
                d = diagnose(Evidence(), kb, fh)
            assert d.problems and d.problems[0].id == "max-model-len-exceeds-kv-cache"

        t_ours = time_it(ours)
        patterns = [to_ere(cs.sig.pattern) for cs in compiled.signatures]
        ere = [p for p in patterns if p]
        pat_file = Path(tmp) / "patterns.txt"
        pat_file.write_text("\n".join(ere) + "\n")
        t_grep = time_it(lambda: subprocess.run(["grep", "-E", "-c", "-f", str(pat_file),
                                                 str(log)], capture_output=True, check=False))
        rss_big, rss_small = peak_rss_mb(log), peak_rss_mb(small)

    slowest = ("", 0.0)
    for cs in compiled.signatures:
        cs.regex.search("")  # compile outside the timed search
        anchor = cs.anchors[0]
        for seed in (anchor + " ", anchor + "1" * 40, "1" * 64, anchor[:-1]):
            text = (seed * ((1 << 20) // len(seed) + 1))[: 1 << 20]
            t0 = time.perf_counter()
            cs.regex.search(text)
            dt = time.perf_counter() - t0
            if dt > slowest[1]:
                slowest = (cs.sig.id, dt)

    mbs = size / (1 << 20)
    print(f"log: {mbs:.0f} MB, {len(compiled.signatures)} signatures "
          f"({len(ere)} translated to ERE for grep)")
    print(f"inferbot diagnose: {t_ours:.2f} s = {mbs / t_ours:.0f} MB/s")
    print(f"grep -E -c -f:     {t_grep:.2f} s = {mbs / t_grep:.0f} MB/s")
    print(f"ratio inferbot/grep: {t_ours / t_grep:.2f}x (target <= 5x, >= 150 MB/s)")
    print(f"peak RSS: {rss_big:.0f} MB on {mbs:.0f} MB, {rss_small:.0f} MB on "
          f"{mbs / 4:.0f} MB (target < 200 MB, flat)")
    print(f"slowest pattern on 1 MB adversarial input: {slowest[0]} {slowest[1] * 1000:.1f} ms")



if __name__ == "__main__":
    main()
