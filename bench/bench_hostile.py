"""Hostile pastes stay linear: each shape at 1x and 4x its size, through the whole diagnosis.

Shapes: random bytes; one message cut into one-character lines, each under a repeated log
prefix; every line ending at the same width (the wrap detector's worst case); a person's
sentences re-flowed at a width with no log at all. Prints MB/s and the 4x/1x time ratio
(about 4 when the cost is linear; 16 would be quadratic). Pastes up to 4 MiB are unwrapped,
larger input is scanned raw, so 1x is sized to keep 4x within the paste path.

Usage: python bench/bench_hostile.py [--base-kib 900]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.diagnose import diagnose  # noqa: E402
from bot.kb.loader import load_kb  # noqa: E402
from bot.schema import Evidence  # noqa: E402

KV = ("ValueError: To serve at least one request with the model's max seq len (262144), "
      "(36.0 GiB KV cache is needed, which is larger than the available KV cache memory "
      "(6.94 GiB).")
PREFIX = "(EngineCore_DP0 pid=1) ERROR 11-30 10:00:01 [core.py:700] "
SENTENCE = ("we restarted the server after the upgrade and it ran out of memory again while "
            "loading the model on two of the cards ")


def _fill(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


SHAPES: dict[str, Callable[[int], str]] = {
    "random bytes": lambda n: random.Random(7).randbytes(n).decode("latin-1"),
    "one-char lines": lambda n: _fill("".join(PREFIX + c + "\n" for c in KV), n),
    "all at one width": lambda n: _fill("a" * 79 + "\n", n) + KV + "\n",
    "re-flowed prose": lambda n: "\n".join(
        line for line in _wrap(_fill(SENTENCE, n), 76)) + "\n",
}


def _wrap(text: str, width: int) -> list[str]:
    out, line = [], ""
    for word in text.split():
        if len(line) + len(word) + 1 > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*out, line]


def _time(text: str) -> float:
    kb = load_kb()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        diagnose(Evidence(text=text), kb)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-kib", type=int, default=900)
    args = ap.parse_args()
    base = args.base_kib * 1024
    print(f"{'shape':<18}{'1x MB/s':>10}{'4x MB/s':>10}{'4x/1x time':>12}")
    for name, make in SHAPES.items():
        small, large = make(base), make(4 * base)
        t1, t4 = _time(small), _time(large)
        mb1, mb4 = len(small.encode()) / 1e6, len(large.encode()) / 1e6
        print(f"{name:<18}{mb1 / t1:>10.1f}{mb4 / t4:>10.1f}{t4 / t1:>12.2f}")


if __name__ == "__main__":
    main()
