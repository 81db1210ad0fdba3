"""Folding a log's repeated lines gives the diagnosis line-by-line reading gives.

Each input is diagnosed twice, folded (the default) and with no families (every anchored line
offered, as the scanner always did), and the two JSON answers must be identical: facts,
problems, evidence lines and their numbers, causes, fixes. Inputs: every shipped example, each
KB excerpt inside a busy server's log, generated logs of every density and shape, the fatal line
at every read-chunk boundary, and the fatal message wrapped by a terminal.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot import diagnose as diagnose_module
from bot.diagnose import diagnose
from bot.evidence import scan
from bot.evidence.base import FactSink, Fold, Line, Probe
from bot.evidence.families import Family
from bot.evidence.scan import Scanner
from bot.kb.loader import KB, load_kb
from bot.lazyre import LazyPattern
from bot.schema import Diagnosis, Evidence, to_json
from tests.corpus.score import load_cases
from tests.evidence import serverlog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.log"))
DEV = ROOT / "tests" / "data" / "dev_incidents.jsonl"
STREAM = 64 * 1024  # larger inputs are streamed (in tests; 4 MB in use)


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb(use_cache=False)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Logs of a few hundred kB read as big ones are: streamed, in several chunks."""
    monkeypatch.setattr(diagnose_module, "MAX_PASTE_BYTES", STREAM)
    monkeypatch.setattr(scan, "CHUNK", 96 * 1024)
    yield


def both(kb: KB, text: str | None = None, data: bytes | None = None) -> tuple[str, str]:
    """(folded, line by line) JSON of one input: `text` as a paste, `data` as a file."""
    def read(**kw: object) -> Diagnosis:
        if data is not None:
            return diagnose(Evidence(), kb, io.BytesIO(data), **kw)  # type: ignore[arg-type]
        return diagnose(Evidence(text=text or ""), kb, **kw)  # type: ignore[arg-type]
    return to_json(read(), indent=1), to_json(read(families=()), indent=1)


def assert_same(folded: str, plain: str, what: str) -> None:
    if folded != plain:
        a, b = json.loads(folded), json.loads(plain)
        diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        raise AssertionError(f"{what}: folding changed {sorted(diff)}: {str(diff)[:2000]}")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_example_logs(kb: KB, path: Path, small_chunks: None) -> None:
    raw = path.read_bytes()
    assert_same(*both(kb, text=raw.decode()), f"{path.name} pasted")
    busy = serverlog.text(4 * STREAM, 0.2, mix=serverlog.EVERY_SHAPE)
    assert_same(*both(kb, data=(busy + raw.decode()).encode()), f"{path.name} in a busy log")


def kb_excerpts(kb: KB) -> list[tuple[str, str]]:
    return [(f"{owner}/{kind}/{i}", ex.text) for owner, exset in sorted(kb.examples.items())
            for kind, examples in (("match", exset.match), ("near_miss", exset.near_miss))
            for i, ex in enumerate(examples)]


def test_every_kb_excerpt_pasted(kb: KB) -> None:
    for name, text in kb_excerpts(kb):
        assert_same(*both(kb, text=text), name)


@pytest.mark.slow
def test_every_corpus_paste_and_incident(kb: KB) -> None:
    """The public corpus's real pastes and the incident excerpts the tests label."""
    texts = [(case["id"], case["text"]) for case in load_cases()]
    texts += [(row["id"], row["text"]) for row in (json.loads(line) for line in DEV.read_text(
        encoding="utf-8").splitlines() if line.strip())]
    for name, text in texts:
        assert_same(*both(kb, text=text), name)


@pytest.mark.slow
def test_every_kb_excerpt_inside_a_busy_log(kb: KB) -> None:
    """The excerpt's lines fall between family lines: what they read of the phase, of the
    contexts and of the facts the family lines set must be as line-by-line reading leaves it."""
    for k, (name, text) in enumerate(kb_excerpts(kb)):
        before = serverlog.text(6000, 0.5, seed=k, mix=serverlog.EVERY_SHAPE)
        after = "".join(line + "\n" for line in serverlog.lines(
            40, 0.5, seed=k + 1, mix=serverlog.EVERY_SHAPE))
        assert_same(*both(kb, text=before + text.rstrip("\n") + "\n" + after), name)


@pytest.mark.parametrize("density", [0.003, 0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("mix", ["vllm", "every shape"])
def test_generated_server_logs(kb: KB, density: float, mix: str, small_chunks: None) -> None:
    shapes = serverlog.MIX if mix == "vllm" else serverlog.EVERY_SHAPE
    data = serverlog.text(6 * STREAM, density, seed=int(density * 1000),
                          mix=shapes).encode()
    folded, plain = both(kb, data=data)
    assert_same(folded, plain, f"{mix} at {density:.1%}")
    assert json.loads(folded)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"


class _Counted:
    """A consumer, counting the lines it is offered."""

    def __init__(self, consumer: object, counter: list[int]) -> None:
        self._consumer, self._counter = consumer, counter

    def __getattr__(self, name: str) -> object:
        return getattr(self._consumer, name)

    def feed(self, line: object, sink: object) -> None:
        self._counter.append(1)
        self._consumer.feed(line, sink)  # type: ignore[attr-defined]


def test_a_busy_log_is_read_through_a_few_of_its_lines(kb: KB, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Of thousands of metrics, request and preemption lines (12 families) the consumers are
    offered a few per family: those that can change the answer."""
    monkeypatch.setattr(diagnose_module, "MAX_PASTE_BYTES", STREAM)
    data = serverlog.text(24 * STREAM, 0.5, mix=serverlog.EVERY_SHAPE).encode()  # one chunk
    offered: dict[bool, int] = {}
    for folding in (True, False):
        fed: list[int] = []

        def counting(consumers: list[object], *args: object, fed: list[int] = fed,
                     **kw: object) -> Scanner:
            return Scanner([_Counted(c, fed) for c in consumers], *args, **kw)  # type: ignore

        monkeypatch.setattr(diagnose_module, "Scanner", counting)
        diagnose(Evidence(), kb, io.BytesIO(data), **({} if folding else {"families": ()}))
        offered[folding] = len(fed)
    assert offered[True] * 10 < offered[False], offered


@pytest.mark.slow
def test_the_fatal_line_across_every_read_boundary(kb: KB, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    """A read of the log ends at every byte of the fatal line and just around it: the line is
    read whole, once, and the diagnosis is line-by-line reading's."""
    head = 1024  # diagnose reads this much (and a byte) to tell a paste from a log
    monkeypatch.setattr(diagnose_module, "MAX_PASTE_BYTES", head)
    data = serverlog.text(STREAM, 0.5, mix=serverlog.EVERY_SHAPE).encode()
    start = data.rindex(b"\n", 0, data.index(b"ValueError: To serve at least one")) + 1
    end = data.index(b"\n", start)
    _, plain = both(kb, data=data)
    assert json.loads(plain)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
    for boundary in range(start - 3, end + 4):
        monkeypatch.setattr(scan, "CHUNK", boundary - (head + 1))  # reads end at `boundary`
        folded = to_json(diagnose(Evidence(), kb, io.BytesIO(data)), indent=1)
        assert_same(folded, plain, f"a read ending at byte {boundary - start} of the line")


@pytest.mark.parametrize("width", [80, 120])
def test_a_wrapped_fatal_message_in_a_busy_log(kb: KB, width: int, small_chunks: None) -> None:
    """A terminal cut the error over lines, each fragment with the logger's prefix: pasted, it
    is rejoined and read; streamed, its figures are still read; folded or not, the same."""
    prefix = "(EngineCore_DP0 pid=65064) ERROR 11-18 18:07:28 [core.py:700] "
    error = next(line for line in serverlog.TAIL.splitlines() if "ValueError" in line)
    body = error[len(prefix):]
    wrapped = "".join(prefix + body[i:i + width] + "\n" for i in range(0, len(body), width))
    busy = serverlog.text(3 * STREAM, 0.2, mix=serverlog.EVERY_SHAPE)
    log = busy.replace(error + "\n", wrapped)
    assert wrapped in log
    pasted = log[-STREAM // 2:]  # a paste is unwrapped
    folded, plain = both(kb, text=pasted)
    assert_same(folded, plain, f"pasted, cut at {width}")
    assert json.loads(folded)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
    folded, plain = both(kb, data=log.encode())
    assert_same(folded, plain, f"streamed, cut at {width}")
    facts = json.loads(folded)["facts"]
    assert facts["kv_cache_available_gib"] == 9.97 and facts["max_model_len"] == 1048576


# -- the semantics, on a family of one's own ------------------------------------------------

TICK = Family("tick", "INFO {time} {src} tick {int}: usage {num}% of {word}")
USAGE = Probe(LazyPattern(r"usage (?P<gpu_kv_cache_usage_pct>\d{1,3})%"), peak=True)


@dataclass
class Reader:
    anchors: tuple[str, ...]
    folds: Fold | None = None
    follow: int = 0
    lines: list[str] = field(default_factory=list)

    def feed(self, line: Line, sink: FactSink) -> None:
        self.lines.append(line.text)

    def finish(self, sink: FactSink) -> None:
        """Nothing pending."""

    def fold(self) -> Fold | None:
        return self.folds


def ticks(*usages: int, word: str = "gpu") -> list[str]:
    return [f"INFO 11-18 18:00:0{i % 10} [m.py:1] tick {i}: usage {u}% of {word}"
            for i, u in enumerate(usages)]


def read(lines: list[str], *readers: Reader) -> None:
    Scanner(list(readers), families=(TICK,)).scan("".join(x + "\n" for x in lines), FactSink())


def test_without_a_fold_every_line_is_offered() -> None:
    plain = Reader(("tick",))
    read(ticks(1, 2, 3, 4), plain)
    assert len(plain.lines) == 4


def test_a_fold_is_offered_the_first_the_last_and_the_peak() -> None:
    folding = Reader(("tick",), Fold(gates=(("usage", USAGE),)))
    lines = ticks(10, 20, 90, 30, 90, 40)
    read(lines, folding)
    assert folding.lines == [lines[0], lines[2], lines[5]]


def test_another_line_ends_a_stretch_of_the_family() -> None:
    """What the line between them reads must be what line-by-line reading left."""
    folding, other = Reader(("tick",), Fold()), Reader(("ERROR",))
    lines = ticks(1, 2, 3, 4, 5, 6)
    read([*lines[:3], "ERROR boom", *lines[3:]], folding, other)
    assert folding.lines == [lines[0], lines[2], lines[3], lines[5]]
    assert other.lines == ["ERROR boom"]


def test_a_line_holding_more_than_the_constant_text_is_offered() -> None:
    """A key outside the constant text (here in a field) changes the reading: offered; an
    anchor of a consumer the family is not offered to brings it that line alone."""
    folding = Reader(("tick",), Fold(keys=("cuda",)))
    gpus = Reader(("a100",))
    lines = ticks(1, 2, 3, word="cuda") + ticks(4, 5, word="a100") + ticks(6, 7)
    read(lines, folding, gpus)
    assert folding.lines == [*lines[:3], lines[-1]]
    assert gpus.lines == lines[3:5]


TOCK = Family("tock", "INFO {time} {src} tock {int}: load {num}% of {word}")


def test_a_line_leaving_a_state_of_its_own_is_followed_by_the_familys_own() -> None:
    """A milestone inside a line (here in a field) leaves another phase; a later line offered
    must read the phase the family's next line set again, as it would line by line."""
    seven = Probe(LazyPattern(r"load 7%"))
    folding = Reader(("tick", "tock", "boom"),
                     Fold(gates=(("load", seven),), marks=(("tick", 1), ("boom", 2))))
    t = ticks(1, 2, 3, 4)
    t[1] = t[1].replace("of gpu", "of boom")
    tock = [x.replace("tick", "tock").replace("usage", "load") for x in ticks(6, 7, 8)]
    lines = [t[0], t[1], t[2], tock[0], tock[1], tock[2], t[3]]
    Scanner([folding], families=(TICK, TOCK)).scan("".join(x + "\n" for x in lines), FactSink())
    # tock[1] is read for its probe: after the stray milestone, t[2] must come before it
    assert folding.lines.index(t[1]) < folding.lines.index(t[2]) < folding.lines.index(tock[1])
