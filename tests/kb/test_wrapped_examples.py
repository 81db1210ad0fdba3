"""Every shipped excerpt reads the same however it was pasted.

A terminal or Slack window cuts lines at its width (mid-word, mid-number), Ray and vLLM's
workers repeat their prefix on every fragment, people quote with `> `. Each KB excerpt, pasted
each of those ways, must give the same top problem (or cause, for a cause's excerpts) and the
same figures as the excerpt itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from bot.diagnose import diagnose
from bot.evidence.paste import is_prose, split_prefix
from bot.kb.loader import KB, load_kb
from bot.schema import Evidence

PREFIX = "(EngineCore_DP0 pid=65064) ERROR 11-30 10:00:01 [core.py:700] "
# Printed by something other than the server's logger: the shell (its word on a killed process,
# a command's continued lines), a table (nvidia-smi), a person's Markdown heading.
NOT_LOGGED = re.compile(r"(?:Killed|Aborted|Segmentation fault|Bus error)\b|[|+]|#{1,6} |"
                        r"\s{0,8}--[a-z][\w-]*|.*\s\\$")
FIGURES = ("max_model_len", "kv_cache_needed_gib", "kv_cache_available_gib",
           "estimated_max_model_len", "gpu_total_gib", "free_memory_gib",
           "oom_tried_to_allocate_gib", "weights_gib", "gpu_blocks", "kv_cache_tokens",
           "tensor_parallel_size", "gpu_memory_utilization", "preemptions")


def logged(line: str) -> bool:
    """Whether the server's logger would put its prefix on `line`: not on a person's
    sentence, a table or the shell's word on a killed process, nor twice on a line."""
    return not (is_prose(line) or NOT_LOGGED.match(line) or split_prefix(line)[1])


def cut(text: str, width: int, prefix: str = "") -> str:
    """What a terminal does: every line cut at `width` characters, spaces where they fell;
    with `prefix`, a logger's prefix on every fragment of each logged line."""
    out = []
    for line in text.splitlines():
        lead = prefix if logged(line) else ""
        out += [lead + line[i:i + width] for i in range(0, len(line), width)] or [""]
    return "\n".join(out)


def prefixed(text: str, prefix: str = PREFIX) -> str:
    """A logger's prefix on every logged line."""
    return "\n".join(prefix + line if logged(line) else line for line in text.splitlines())


def quoted(text: str) -> str:
    return "\n".join("> " + line for line in text.splitlines())


WIDTHS = (60, 73, 80, 100, 120, 133, 160, 200)


def _at(width: int, how: Callable[[str, int], str]) -> Callable[[str], str]:
    return lambda text: how(text, width)


TRANSFORMS: dict[str, Callable[[str], str]] = {
    **{f"cut{w}": _at(w, cut) for w in WIDTHS},
    **{f"cut{w}-then-prefixed": _at(w, lambda t, n: cut(t, n, PREFIX)) for w in WIDTHS},
    **{f"prefixed-then-cut{w}": _at(w, lambda t, n: cut(prefixed(t), n)) for w in WIDTHS},
    **{f"cut{w}-quoted": _at(w, lambda t, n: quoted(cut(t, n))) for w in (60, 100, 160)},
    "compose-prefix": lambda t: "\n".join("vllm-1  | " + x for x in t.splitlines()),
    "ci-viewer": lambda t: "\n".join("  | [2026-08-30T12:56:32Z] " + x for x in t.splitlines()),
}


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


def reading(kb: KB, text: str) -> tuple[Any, ...]:
    d = diagnose(Evidence(text=text), kb)
    top = d.problems[0].id if d.problems else None
    causes = tuple(sorted(c.id for c in d.causes if c.supported))
    return (top, causes, *(getattr(d.facts, name) for name in FIGURES))


@pytest.fixture(scope="module")
def excerpts(kb: KB) -> list[tuple[str, str, tuple[Any, ...]]]:
    out = []
    for owner, exset in sorted(kb.examples.items()):
        for i, ex in enumerate(exset.match):
            out.append((f"{owner}/match/{i}", ex.text, reading(kb, ex.text)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_pasted_any_way_reads_the_same(kb: KB, excerpts: list[tuple[str, str, tuple[Any, ...]]],
                                       name: str) -> None:
    transform = TRANSFORMS[name]
    changed = [(eid, base, got) for eid, text, base in excerpts
               if (got := reading(kb, transform(text))) != base]
    assert not changed, changed[:3]
