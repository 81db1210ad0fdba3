"""The first screen an on-call engineer reads, on the real Block Kit payloads: for the shipped
example, every KB problem's first example and a host check (tests/slack/test_collect_click),
the first message is at most 5 blocks and 700 visible characters, "Details" expands it, the
file in the thread holds the rest, and no internal id appears in any text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from bot.diagnose import diagnose
from bot.kb.loader import KB
from bot.render.present import History
from bot.schema import Diagnosis, Evidence, parse
from bot.slack import blocks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "vllm-max-model-len.log"
Block = dict[str, Any]


def visible(bs: list[Block]) -> str:
    """What a reader sees: the text of sections, contexts, buttons and menus, without the
    mrkdwn markup (code fences, bold), a link as its label, entities decoded."""
    out: list[str] = []
    for b in bs:
        if "text" in b:
            out.append(b["text"]["text"])
        for e in b.get("elements", []):
            if e.get("type") == "mrkdwn":
                out.append(e["text"])
            elif "text" in e:
                out.append(e["text"]["text"])
            if "placeholder" in e:
                out.append(e["placeholder"]["text"])
    text = "\n".join(out).replace("```", "").replace("*", "")
    text = re.sub(r"<([^|>]+)\|([^>]+)>", r"\2", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def internal_ids(d: Diagnosis) -> set[str]:
    """Ids that mean something only inside inferbot: problems, causes, signatures, fixes,
    withheld fixes and the fingerprint."""
    ids = {p.id for p in d.problems} | {c.id for c in d.causes} | {c.id for c in d.more_causes}
    ids |= {s for p in d.problems for s in p.signature_ids}
    ids |= {f.id for f in d.fixes} | {w.id for w in d.withheld_fixes}
    return ids | {d.fingerprint.digest}


def assert_first_screen(bs: list[Block], ids: set[str]) -> None:
    text = visible(bs)
    assert len(bs) <= blocks.FIRST_BLOCKS, [b["type"] for b in bs]
    assert len(text) <= blocks.FIRST_CHARS, (len(text), text)
    assert_no_ids(text, ids)


def assert_no_ids(text: str, ids: set[str]) -> None:
    for i in ids:
        assert not re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text), (i, text)
    assert not re.search(r"\bg\d+\b", text)  # group ids


def answer_diagnosis(bs: list[Block], channel: str, settings: Settings) -> Diagnosis:
    """The stored diagnosis behind a posted answer, read back as its Details button does."""
    from bot.flows import Asker, shown_incident

    value = next(e["value"] for b in bs if b["type"] == "actions" for e in b["elements"]
                 if e["action_id"] == blocks.ACTION_DETAILS)
    asker = Asker(origin="slack", channel=channel)
    return shown_incident(int(value.split(":")[0]), asker, settings=settings).diagnosis


def cases(kb: KB) -> list[tuple[str, Diagnosis]]:
    out = [("examples/vllm-max-model-len.log",
            diagnose(Evidence(text=EXAMPLE.read_text()), kb))]
    for pid in sorted(kb.problems):
        ex = kb.examples.get(pid)
        if ex and ex.match:
            out.append((f"{pid}/match/1", diagnose(Evidence(text=ex.match[0].text), kb)))
    return out


HISTORY = History(incident_id=4, count=4, hosts=("gpu-07",), fixed_with="--max-model-len 32768",
                  fixed_by="U0ALICE001", fixed_link="https://example.slack.com/archives/C1/p1")


def test_every_problem_s_first_example_has_a_short_first_screen(kb_real: KB) -> None:
    seen = cases(kb_real)
    assert len(seen) == 1 + sum(1 for p in kb_real.problems if kb_real.examples.get(p))
    for name, d in seen:
        for history in (None, HISTORY):
            reply = blocks.answer(d, history=history, incident_id=4, host="gpu-07",
                                  can_collect_from="gpu-07")
            assert_first_screen(reply.blocks, internal_ids(d))
            # the file holds the rest: every detail the expanded message shows and more
            assert reply.attachment is not None, name
            assert_no_ids(reply.attachment, internal_ids(d))
            expanded = blocks.answer(d, history=history, incident_id=4, host="gpu-07",
                                     can_collect_from="gpu-07", expanded=True)
            assert len(expanded.blocks) > len(reply.blocks), name
            assert len(json.dumps(expanded.blocks)) <= blocks.TEXT_BUDGET
            assert_no_ids(visible(expanded.blocks), internal_ids(d))
            words = " ".join(reply.attachment.split())
            for b in expanded.blocks[len(reply.blocks) - 1:-1]:
                title = re.match(r"\*([^*]+)\*", b.get("text", {}).get("text", ""))
                if title:
                    assert title.group(1) in words, (name, title.group(1))


def test_the_history_line_comes_second_with_a_mention_and_a_link(kb_real: KB) -> None:
    d = cases(kb_real)[0][1]
    reply = blocks.answer(d, history=HISTORY, incident_id=4, host=None, can_collect_from=None)
    second = reply.blocks[1]["elements"][0]["text"]
    assert "seen 4 times on gpu-07" in second
    assert "by <@U0ALICE001> with --max-model-len 32768" in second
    assert "(<https://example.slack.com/archives/C1/p1|thread>)" in second


def test_confidence_reads_as_a_word_and_proof_is_said_once(kb_real: KB) -> None:
    d = cases(kb_real)[0][1]
    reply = blocks.answer(d, history=None, incident_id=4, host=None, can_collect_from=None,
                          expanded=True)
    text = visible(reply.blocks)
    assert "high confidence" in text
    assert f"{d.problems[0].confidence:.2f}" not in text and "confidence 0." not in text
    proof = d.problems[0].evidence[0][:80]
    assert " ".join(text.split()).count(" ".join(proof.split())) == 1


@pytest.fixture
def kb_real() -> KB:
    from bot.kb.loader import load_kb

    return load_kb()


def test_a_stored_diagnosis_reads_back(kb_real: KB) -> None:
    from bot.schema import to_data

    d = cases(kb_real)[0][1]
    assert parse(Diagnosis, to_data(d)).fixes == d.fixes


def test_the_docs_script_renders_answers_to_plain_text(tmp_path: Path) -> None:
    import runpy

    script = runpy.run_path(str(ROOT / "docs" / "render_slack.py"))
    assert script["main"]([str(EXAMPLE), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "slack-answer-vllm-max-model-len.txt").read_text()
    first, details = text.split("# after Details")
    assert "# first message: 5 blocks" in first and "[button: Details]" in first
    assert "[menu: This fixed it: 1. --max-model-len 1048576 -> 32768]" in first
    assert "[button: Less]" in details and "*How to confirm*" in details
    for name in ("slack-answer-vllm-max-model-len.txt", "slack-answer-tp-fp8.txt"):
        assert (ROOT / "docs" / name).is_file()  # the two committed renderings
