"""The scanner offers each consumer exactly the lines it asked for, with true line numbers,
whatever the chunking, line length or encoding of the input."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pytest

from bot.evidence import scan as scan_mod
from bot.evidence.base import FactSink, Line
from bot.evidence.scan import Scanner


@dataclass
class Recorder:
    anchors: tuple[str, ...]
    follow: int = 0
    lines: list[Line] = field(default_factory=list)
    finished: bool = False

    def feed(self, line: Line, sink: FactSink) -> None:
        self.lines.append(line)

    def finish(self, sink: FactSink) -> None:
        self.finished = True


def run(text: str | bytes, *consumers: Recorder) -> scan_mod.ScanStats:
    return Scanner(list(consumers)).scan(text, FactSink())


def test_only_anchored_lines_with_their_numbers() -> None:
    rec = Recorder(("KV cache",))
    stats = run("a\nb KV cache here\nc\nKV cache again\n", rec)
    assert [(ln.no, ln.text) for ln in rec.lines] == [(2, "b KV cache here"),
                                                      (4, "KV cache again")]
    assert stats.lines == 4 and rec.finished


def test_each_consumer_sees_only_its_own_anchors() -> None:
    a, b = Recorder(("alpha",)), Recorder(("beta",))
    run("alpha\nbeta\nalpha beta\n", a, b)
    assert [ln.no for ln in a.lines] == [1, 3]
    assert [ln.no for ln in b.lines] == [2, 3]


def test_follow_offers_the_lines_after_an_anchor() -> None:
    rec = Recorder(("NVIDIA-SMI",), follow=2)
    run("x\n| NVIDIA-SMI 550 |\n| row 1 |\n| row 2 |\n| row 3 |\n", rec)
    assert [ln.no for ln in rec.lines] == [2, 3, 4]


@pytest.mark.parametrize("chunk", [20, 33, 64, 1 << 20])  # >= the longest line
def test_chunking_never_changes_what_is_seen(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK", chunk)
    text = "".join(f"line {i} {'KV cache' if i % 3 == 0 else 'noise'}\n" for i in range(60))
    text += "| NVIDIA-SMI |\nt1\nt2\n"
    rec, tab = Recorder(("KV cache",)), Recorder(("NVIDIA-SMI",), follow=2)
    run(text, rec, tab)
    assert [ln.no for ln in rec.lines] == [i + 1 for i in range(60) if i % 3 == 0]
    assert [ln.text for ln in tab.lines] == ["| NVIDIA-SMI |", "t1", "t2"]


def test_slack_and_terminal_noise_is_removed() -> None:
    rec = Recorder(("KV cache",))
    raw = ("```\r\n\x1b[31mERROR\x1b[0m KV cache &lt;0 &amp; 1&gt;\r\n```")
    run(raw, rec)
    assert rec.lines[0].text == "ERROR KV cache <0 & 1>"


def test_a_huge_line_is_seen_through_a_window_around_the_anchor() -> None:
    rec = Recorder(("No available memory",))
    line = "x" * 5_000_000 + " No available memory for the cache blocks " + "y" * 5_000_000
    run(line + "\n", rec)
    assert len(rec.lines) == 1
    assert "No available memory for the cache blocks" in rec.lines[0].text
    assert len(rec.lines[0].text) <= 16 * 1024


def test_invalid_utf8_and_binary_are_survivable() -> None:
    rec = Recorder(("KV cache",))
    stats = run(b"\xff\xfe\x00\x01 KV cache \xc3\x28\n" + bytes(range(256)) * 100, rec)
    assert stats.binary
    assert rec.lines and "KV cache" in rec.lines[0].text


def test_streams_are_read_in_bounded_chunks() -> None:
    rec = Recorder(("ERROR",))
    body = b"INFO fine\n" * 200_000 + b"ERROR the end\n"
    stats = Scanner([rec]).scan(io.BytesIO(body), FactSink())
    assert stats.bytes == len(body) and stats.lines == 200_001
    assert [ln.no for ln in rec.lines] == [200_001]


def test_empty_input() -> None:
    rec = Recorder(("x",))
    stats = run("", rec)
    assert stats.bytes == 0 and stats.lines == 0 and rec.lines == []
