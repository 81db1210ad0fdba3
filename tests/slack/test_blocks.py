"""Block Kit within Slack's limits, escaping, and the buttons' values."""

from __future__ import annotations

import json

from bot.fingerprint import fingerprint
from bot.render.present import History
from bot.schema import Diagnosis, Facts, Fix, Guide, ProblemMatch, Sizing
from bot.slack import blocks


def diagnosis(n_fixes: int = 2, evidence_lines: int = 2, line: str = "ValueError: x < y && z"
              ) -> Diagnosis:
    return Diagnosis(
        kb_version="1.2.0", kb_hash="abc123", host="gpu-07",
        fingerprint=fingerprint("max-model-len-exceeds-kv-cache", "", "gpu-07", None),
        problems=[ProblemMatch(id="max-model-len-exceeds-kv-cache",
                               title="max-model-len does not fit in the KV cache",
                               confidence=0.95, evidence=[line] * evidence_lines,
                               line_numbers=list(range(1, evidence_lines + 1)))],
        facts=Facts(engine="vllm", max_model_len=131072, kv_cache_available_gib=9.97,
                    kv_cache_needed_gib=16.0, estimated_max_model_len=77824),
        sizing=Sizing(max_model_len_that_fits=77824),
        fixes=[Fix(id=f"fix-{i}", title=f"Lower max-model-len {i}",
                   command="vllm serve m --max-model-len 77824",
                   predicted="fits: 9.97 GiB / 128 KiB per token") for i in range(n_fixes)],
        guide=Guide(short_answer="The longest request does not fit.",
                    confirm=["grep 'KV cache' the log"]),
    )


def texts(bs: list[blocks.Block]) -> list[str]:
    out = []
    for b in bs:
        if "text" in b:
            out.append(b["text"]["text"])
        out.extend(e["text"] for e in b.get("elements", []) if e.get("type") == "mrkdwn")
    return out


def test_answer_names_the_problem_the_numbers_and_the_copyable_fix() -> None:
    reply = blocks.answer(diagnosis(), history=History(incident_id=12, count=3,
                                                       hosts=("gpu-07",)),
                          incident_id=12, host="gpu-07", can_collect_from="gpu-07")
    joined = "\n".join(texts(reply.blocks))
    assert "max-model-len does not fit" in joined
    assert "```vllm serve m --max-model-len 77824```" in joined
    assert "seen 3 times on gpu-07" in joined
    values = {e["action_id"]: e.get("value") or [o["value"] for o in e["options"]]
              for b in reply.blocks for e in b.get("elements", []) if "action_id" in e}
    assert values == {"details": "12:more", "fix_worked": ["12:fix-0", "12:fix-1"],
                      "collect_host": "gpu-07", "wrong_diagnosis": "12"}
    # the numbers are behind Details and in the file, with the log line escaped there
    assert "Largest max-model-len that fits: 77,824" not in joined
    assert reply.attachment and "Largest max-model-len that fits: 77,824" in reply.attachment
    expanded = blocks.answer(diagnosis(), history=None, incident_id=12, host=None,
                             can_collect_from=None, expanded=True)
    shown = "\n".join(texts(expanded.blocks))
    assert "Largest max-model-len that fits: 77,824" in shown
    assert "x &lt; y &amp;&amp; z" in shown and "x < y" not in shown
    assert expanded.attachment is None  # the file went up with the first message
    assert "--max-model-len 77824" in reply.text


def test_no_incident_id_means_no_buttons_that_need_one() -> None:
    reply = blocks.answer(diagnosis(), history=None, incident_id=None, host=None,
                          can_collect_from=None)
    for action in ("fix_worked", "wrong_diagnosis", "details"):
        assert action not in json.dumps(reply.blocks)


def test_a_huge_diagnosis_stays_within_limits_and_the_rest_goes_to_a_file() -> None:
    d = diagnosis(n_fixes=40, evidence_lines=300, line="E" * 400)
    for expanded in (False, True):
        reply = blocks.answer(d, history=None, incident_id=1, host=None,
                              can_collect_from=None, expanded=expanded)
        assert len(reply.blocks) <= blocks.MAX_BLOCKS
        assert all(len(t) <= blocks.SECTION_MAX for t in texts(reply.blocks))
        assert len(json.dumps(reply.blocks)) <= blocks.TEXT_BUDGET
    first = blocks.answer(d, history=None, incident_id=1, host=None, can_collect_from=None)
    assert first.attachment and "Lower max-model-len 39" in first.attachment
    assert len(first.blocks) <= blocks.FIRST_BLOCKS


def test_code_blocks_cannot_be_closed_by_the_content() -> None:
    assert blocks.code("a```b").count("```") == 2


def test_long_plain_text_goes_up_as_a_file() -> None:
    reply = blocks.history_reply("*History*", "row\n" * 5000)
    assert reply.attachment and reply.attachment_name == "history.txt"
    assert len(json.dumps(reply.blocks)) < blocks.TEXT_BUDGET


def test_home_view_is_within_the_home_limit() -> None:
    view = blocks.home_view([f"`#{i}`" for i in range(200)], ["`g1` 3x"] * 200, "1.0", None)
    assert view["type"] == "home" and len(view["blocks"]) <= blocks.MAX_HOME_BLOCKS
