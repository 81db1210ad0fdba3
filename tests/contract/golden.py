"""What the command line prints for the inputs the project ships, recorded so a change that
means to keep behaviour can prove it did.

The inputs: every log in examples/ (`diagnose --json`, and the text answer), every excerpt in
the knowledge base's examples (`diagnose --json`: the real pastes, both must-match and
near-miss), and a few `size --json` queries. Each output goes through `bot.cli.main`, exactly
as a user's command does, with `--no-store`.

The knowledge base's own identity (`kb_version`, `kb_hash`, the presentation's "knowledge base
VERSION" and the text answer's "KB VERSION (HASH)") is left out of the comparison: it names
the KB files, examples included, so adding an example or bumping the version changes it
without changing any answer. Nothing else is left out; the comparison is of the text, byte
for byte.

`python -B -m tests.contract.golden` rewrites golden.json from the tree it runs in. Run it on
the commit a change starts from (for instance in an exported copy: `git archive BASE | tar -x
-C DIR`, then `PYTHONPATH=DIR python -B -m tests.contract.golden --out golden.json` from DIR),
never on the change itself, or the comparison proves nothing. `--dump DIR` also writes each
whole output, to diff one that differs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden.json")
EXCLUDED = ("kb_version", "kb_hash")
SIZE_QUERIES = (
    ("llama-3.1-8b", "--gpu", "H100"),
    ("Qwen/Qwen3-32B", "--gpu", "A100-80GB", "--gpus", "2", "--tp", "2", "--max-model-len",
     "32768", "--kv-cache-dtype", "fp8"),
    ("meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L40S", "--concurrency", "8",
     "--quantization", "awq"),
)


@dataclass(frozen=True)
class Case:
    """One command and its input. `id` names the input by its content, so reordering the
    KB's examples keeps every id."""

    id: str
    argv: tuple[str, ...]
    text: str | None = None  # written to a file whose path ends argv, when set


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cases() -> list[Case]:
    from bot.kb.loader import load_kb

    out: list[Case] = []
    for log in sorted((ROOT / "examples").glob("*.log")):
        out.append(Case(f"examples/{log.name}/json", ("diagnose", str(log), "--json",
                                                       "--no-store")))
        out.append(Case(f"examples/{log.name}/text", ("diagnose", str(log), "--no-store")))
    kb = load_kb(use_cache=False)
    seen: set[str] = set()
    for owner, exset in sorted(kb.examples.items()):
        for kind, items in (("match", exset.match), ("near_miss", exset.near_miss)):
            for ex in items:
                case_id = f"kb/{owner}/{kind}/{_digest(ex.text)}"
                if case_id not in seen:
                    seen.add(case_id)
                    out.append(Case(case_id, ("diagnose", "--json", "--no-store"), ex.text))
    for q in SIZE_QUERIES:
        out.append(Case(f"size/{_digest(' '.join(q))}", ("size", *q, "--json")))
    return out


# The text answer's last line names the KB the same way: "KB 2026.12.0 (fb901531c705cb09) · ".
_KB_LINE = re.compile(r"^KB \S{1,40} \([0-9a-f]{16}\) · ", re.MULTILINE)
# the presentation's footer names the KB version too
_KB_FOOTER = re.compile(r'"knowledge base \d{4}\.\d{1,2}\.\d{1,3}"')


def canonical(case: Case, output: str) -> str:
    """The output as compared: without the KB's identity, otherwise as printed."""
    if "--json" not in case.argv:
        return _KB_LINE.sub("KB <kb> · ", output)
    data = json.loads(output)
    for key in EXCLUDED:
        data.pop(key, None)
    return _KB_FOOTER.sub('"knowledge base <kb>"', json.dumps(data, indent=2, ensure_ascii=False))


def run(case: Case) -> tuple[int, str]:
    """(exit code, stdout) of the command, run in this process."""
    from bot.cli import main

    with tempfile.TemporaryDirectory(prefix="inferbot-golden-") as tmp:
        argv = list(case.argv)
        if case.text is not None:
            path = Path(tmp) / "paste.log"
            path.write_text(case.text, encoding="utf-8")
            argv.append(str(path))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(argv)
    return rc, out.getvalue()


def record(case: Case) -> dict[str, object]:
    """What golden.json keeps of one case: the exit code and the output's digest, and the
    whole output for the shipped example logs (short enough to read in a diff)."""
    rc, output = run(case)
    text = canonical(case, output)
    entry: dict[str, object] = {"rc": rc, "sha256": hashlib.sha256(text.encode()).hexdigest()}
    if case.id.startswith("examples/"):
        entry["output"] = json.loads(text) if "--json" in case.argv else text.splitlines()
    return entry


def _all() -> Iterator[tuple[Case, dict[str, object]]]:
    for case in cases():
        yield case, record(case)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=GOLDEN)
    parser.add_argument("--dump", type=Path, help="also write every whole output here")
    args = parser.parse_args(argv)
    recorded: dict[str, object] = {}
    for case, entry in _all():
        recorded[case.id] = entry
        if args.dump:
            target = args.dump / (case.id.replace("/", "__") + ".out")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(canonical(case, run(case)[1]), encoding="utf-8")
    args.out.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    sys.stderr.write(f"{len(recorded)} outputs recorded in {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
