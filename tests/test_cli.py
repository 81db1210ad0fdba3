"""The command line as a user meets it: exit codes, one-line errors, hostile input."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "vllm-max-model-len.log"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], input=stdin,
                          capture_output=True, env=env, timeout=120, check=False)


def test_shipped_example_is_diagnosed_with_the_numbers(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["diagnose", str(EXAMPLE), "--no-store"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "max_model_len needs more KV cache than the GPU has left"
    assert len(lines) <= 12 and "inferbot diagnose --full" in lines[-1]
    assert "high confidence" in out and "128.00 GiB" in out and "9.97 GiB" in out
    # the command keeps the server's other flags and leaves room for two requests
    assert ("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 "
            "--gpu-memory-utilization 0.9") in out
    assert "change: --max-model-len 1048576 -> 32768" in out
    assert "max-model-len-exceeds-kv-cache" not in out  # no internal ids


def test_full_shows_every_section_and_evidence_whole(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert main(["diagnose", str(EXAMPLE), "--no-store", "--full"]) == 0
    out = capsys.readouterr().out
    for title in ("The lines that show it:", "The numbers:", "Likely causes:",
                  "All fixes (least disruptive first):", "How to confirm:", "Prevention:",
                  "FAQ:", "Diagnostic commands:"):
        assert title in out
    joined = " ".join(out.split())
    assert "81,664 is the edge" in joined
    assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in joined
    assert "\033[" not in out  # captured, not a terminal: no colour


def test_causes_named_mid_sentence_keep_their_acronyms(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """sglang#5883's gloo timeout: the causes not ruled out are listed in one sentence, and
    'NCCL cannot ...' stays NCCL there ('nCCL' read as a typo on a phone)."""
    log = tmp_path / "gloo.log"
    log.write_text("Exception: Capture cuda graph failed: [/pytorch/third_party/gloo/gloo/"
                   "transport/tcp/unbound_buffer.cc:133] Timed out waiting 1800000ms for send "
                   "operation to complete\n", encoding="utf-8")
    assert main(["diagnose", str(log), "--no-store", "--full"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("NCCL / multi-GPU communication failure")
    assert "1. One rank stopped participating, so a collective timed out" in out
    assert "Not ruled out: NCCL" in out and "nCCL" not in out


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(EXAMPLE), "--json", "--no-store"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("kb_version", "fingerprint", "incident_id", "problems", "causes", "facts",
                "sizing", "fixes"):
        assert key in d
    assert d["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
    assert 0.0 <= d["problems"][0]["confidence"] <= 1.0
    f = d["facts"]
    assert (f["max_model_len"], f["kv_cache_needed_gib"], f["kv_cache_available_gib"],
            f["estimated_max_model_len"], f["weights_gib"]) == (1048576, 128.0, 9.97, 81664,
                                                                14.9889)
    assert f["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert d["sizing"]["max_model_len_that_fits"] == 81664
    assert d["fixes"][0]["flags"] == {"--max-model-len": 32768}
    assert d["fixes"][0]["change"] == "--max-model-len 1048576 -> 32768"
    assert d["schema_version"] == 2
    first = [s for s in d["presented"]["sections"] if s["first"]]
    assert [s["key"] for s in first] == ["headline", "fix", "why"]


def test_stdin_dash(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    r = cli("diagnose", "-", "--no-store", stdin=EXAMPLE.read_bytes())
    assert r.returncode == 0 and b"needs more KV cache than the GPU has left" in r.stdout


def test_nothing_matched_is_a_plain_answer_with_what_was_read(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    log = tmp_path / "tok.log"
    log.write_text("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192\n"
                   "OSError: Can't load tokenizer for 'Qwen/Qwen2.5-7B-Instruct'.\n")
    assert main(["diagnose", str(log), "--no-store"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No known problem matched.")
    assert "max_model_len: 8192" in out
    assert main(["diagnose", str(log), "--json", "--no-store"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


@pytest.mark.parametrize(("args", "needle"), [
    (["diagnose", "/no/such/file.log"], b"no such file"),
    (["diagnose", "/"], b"is a directory"),
    (["diagnose", "--bogus"], b"unrecognized arguments"),
    (["kb", "show", "no-such-id"], b"no problem or cause"),
    (["frobnicate"], b"invalid choice"),
])
def test_bad_usage_is_exit_2_with_one_line(args: list[str], needle: bytes) -> None:
    r = cli(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert b"Traceback" not in r.stderr


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02binary\xff" * 5000,
                                     b"\xff\xfe invalid \xc3\x28 utf8\n" * 1000])
def test_hostile_small_inputs_get_a_clear_outcome(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "in.log"
    path.write_bytes(content)
    r = cli("diagnose", str(path), "--no-store")
    assert r.returncode == 0, r.stderr
    assert b"No known problem matched." in r.stdout
    assert b"Traceback" not in r.stderr


# Pastes built to hurt the reader: random bytes, a message cut into one-character lines under
# a prefix that repeats on every fragment, and a paste whose every line ends at the same width
# with nothing to rejoin. Each must end in a plain answer.
KV = (b"ValueError: To serve at least one request with the model's max seq len (262144), "
      b"(36.0 GiB KV cache is needed, which is larger than the available KV cache memory "
      b"(6.94 GiB).")
HOSTILE = {
    "random-bytes": random.Random(7).randbytes(3 << 20),
    "one-char-lines": b"".join(b"(EngineCore_DP0 pid=1) ERROR 11-30 10:00:01 [core.py:700] "
                               + bytes([c]) + b"\n" for c in KV * 200),
    "all-at-the-width": (b"a" * 79 + b"\n") * 40_000 + KV + b"\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_pastes_on_stdin_get_an_answer(name: str) -> None:
    r = cli("diagnose", "-", "--no-store", "--json", stdin=HOSTILE[name])
    assert r.returncode == 0, r.stderr[-500:]
    assert b"Traceback" not in r.stderr
    d = json.loads(r.stdout)
    if name == "all-at-the-width":
        # nothing else in the paste: the message at its end is read with its figures
        assert d["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
        assert d["facts"]["kv_cache_needed_gib"] == 36.0


@pytest.mark.slow
def test_a_50mb_paste_on_stdin_is_read_to_its_end() -> None:
    noise = b"INFO 11-18 18:05:02 [logger.py:43] Received request chatcmpl-1: prompt: 'hi'\n"
    paste = noise * (50 * (1 << 20) // len(noise)) + EXAMPLE.read_bytes()
    r = cli("diagnose", "-", "--no-store", "--json", stdin=paste)
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    assert json.loads(r.stdout)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"


PEAK = """
import sys
from bot.cli import main
try:
    main(sys.argv[1:])
finally:  # VmHWM: this process image's peak (ru_maxrss would carry the parent's over exec)
    status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    sys.stderr.write(f"peak-kb {status}\\n")
"""


def _peak_rss_mb_of(args: list[str]) -> tuple[subprocess.CompletedProcess[bytes], float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, env=env,
                       timeout=120, check=False)
    peak = int(r.stderr.decode().rsplit("peak-kb ", 1)[1].split()[0])
    return r, peak / 1024


@pytest.mark.slow
def test_a_50mb_log_is_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    line = b"INFO 11-18 18:05:02 [logger.py:43] Received request chatcmpl-1: prompt: 'hi'\n"
    with path.open("wb") as fh:
        for _ in range(50 * (1 << 20) // len(line)):
            fh.write(line)
        fh.write(EXAMPLE.read_bytes())
    r, peak = _peak_rss_mb_of(["diagnose", str(path), "--no-store", "--json"])
    assert r.returncode == 0
    assert json.loads(r.stdout)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
    assert peak < 200, f"peak RSS {peak:.0f} MB"


@pytest.mark.slow
def test_one_10mb_line_with_the_error_inside(tmp_path: Path) -> None:
    path = tmp_path / "line.log"
    err = (b" ValueError: No available memory for the cache blocks. Try increasing "
           b"`gpu_memory_utilization` when initializing the engine. ")
    path.write_bytes(b"x" * (5 << 20) + err + b"y" * (5 << 20))
    r = cli("diagnose", str(path), "--no-store", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["problems"][0]["id"] == "kv-cache-no-blocks"
    assert "very long line" in (d["input"]["note"] or "")


@pytest.mark.slow
def test_secrets_never_reach_the_output(tmp_path: Path) -> None:
    token = "hf_" + "a1B2c3D4e5" * 4
    key = "sk-proj-" + "Z9y8X7w6V5" * 4
    log = tmp_path / "s.log"
    log.write_text(
        f"vllm serve meta-llama/Llama-3.1-8B-Instruct --api-key {key} --max-model-len 131072\n"
        f"HF_TOKEN={token}\n" + EXAMPLE.read_text()
        + f"ERROR [core.py:700] ValueError: No available memory for the cache blocks. "
          f"api_key={key} Authorization: Bearer {token}\n")
    for fmt in ([], ["--json"]):
        r = cli("diagnose", str(log), "--no-store", *fmt)
        assert r.returncode == 0
        assert token.encode() not in r.stdout and key.encode() not in r.stdout


def test_every_problem_s_first_example_fits_twelve_lines_with_its_history(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.kb.loader import load_kb

    kb = load_kb()
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    for pid in sorted(kb.problems):
        ex = kb.examples.get(pid)
        if not ex or not ex.match:
            continue
        log = tmp_path / f"{pid}.log"
        log.write_text(ex.match[0].text)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INFERBOT_DATABASE_URL", db)
            assert main(["diagnose", str(log)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) <= 12, (pid, lines)
        history = next(i for i, ln in enumerate(lines) if ln.startswith("  incident "))
        assert history <= 3 and "inferbot diagnose --full" in lines[-1], (pid, lines)
        assert pid not in "\n".join(lines)  # the problem's id is internal


def test_the_answer_is_wrapped_to_the_width_columns_says(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "61"}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--no-store",
                        str(ROOT / "examples" / "vllm-max-model-len.log")],
                       capture_output=True, text=True, env=env, timeout=120, check=True)
    lines = r.stdout.splitlines()
    assert len(lines) > 8 and max(len(ln) for ln in lines) <= 60, lines


def test_colour_on_a_terminal_only() -> None:
    from bot.kb.loader import load_kb
    from bot.render.text import Style, render

    kb = load_kb()
    from bot.diagnose import diagnose
    from bot.schema import Evidence

    d = diagnose(Evidence(text=EXAMPLE.read_text()), kb)
    shown = render(d, style=Style(color=True, width=60))
    assert "\033[1mmax_model_len needs more KV cache" in shown
    assert all(len(line) <= 60 for line in render(d, style=Style(width=60)).splitlines())
    r = cli("diagnose", str(EXAMPLE), "--no-store")
    assert b"\033[" not in r.stdout  # piped: plain


def test_bold_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.cli import _style

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert _style().color
    monkeypatch.setenv("NO_COLOR", "1")
    assert not _style().color
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    monkeypatch.delenv("NO_COLOR")
    assert not _style().color
