"""Slack answers as plain text, so their shape can be reviewed without Slack.

    python docs/render_slack.py [LOG ...] [--out DIR]

Each log is diagnosed as a mention would be (with a history line, an incident id and a host
to collect from) and its Block Kit payloads written out, blocks in order: the first message,
then the message after "Details". Block types are in brackets, buttons as [button: ...],
menus as [menu: ...] with their options, mrkdwn as sent. Without LOG, the shipped example and
docs/examples/tp-fp8.log are rendered into docs/ (the renderings committed there).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.diagnose import diagnose  # noqa: E402  (the tree this script sits in)
from bot.kb.loader import load_kb  # noqa: E402
from bot.render.present import History  # noqa: E402
from bot.schema import Evidence  # noqa: E402
from bot.slack import blocks  # noqa: E402

DEFAULT = [ROOT / "examples" / "vllm-max-model-len.log", ROOT / "docs" / "examples" / "tp-fp8.log"]
NOW = datetime.now(UTC)  # the history's ages read the same whenever this runs
HISTORY = History(incident_id=14, count=4, first_seen=NOW - timedelta(days=6, hours=3),
                  hosts=("gpu-07",), status="open", fixed_with="--max-model-len 32768",
                  fixed_by="U0ALICE001", fixed_at=NOW - timedelta(days=2),
                  fixed_link="https://example.slack.com/archives/C0INCIDENT1/p1764406800000100",
                  corrections=1)


def element(e: dict[str, Any]) -> str:
    if e.get("type") == "button":
        link = f" -> {e['url']}" if "url" in e else ""
        return f"[button: {e['text']['text']}{link}]"
    if e.get("type") == "static_select":
        options = "; ".join(o["text"]["text"] for o in e["options"])
        return f"[menu: {e['placeholder']['text']}: {options}]"
    return e.get("text", "") if isinstance(e.get("text"), str) else json.dumps(e)


def render_blocks(bs: list[dict[str, Any]]) -> str:
    out = []
    for b in bs:
        kind = b["type"]
        if kind == "divider":
            out.append("[divider] " + "-" * 40)
        elif kind == "actions":
            out.append("[actions] " + " ".join(element(e) for e in b["elements"]))
        elif kind == "context":
            out.append("[context] " + " | ".join(element(e) for e in b["elements"]))
        else:
            out.append(f"[{kind}] {b['text']['text']}")
    return "\n".join(out)


def rendering(log: Path) -> str:
    kb = load_kb()
    d = diagnose(Evidence(text=log.read_text(encoding="utf-8"), host="gpu-07"), kb)
    first = blocks.answer(d, history=HISTORY, incident_id=14, host="gpu-07",
                          can_collect_from="gpu-07")
    more = blocks.answer(d, history=HISTORY, incident_id=14, host="gpu-07",
                         can_collect_from="gpu-07", expanded=True)
    return "\n".join([
        f"# {log.relative_to(ROOT) if log.is_relative_to(ROOT) else log}: the Slack answer",
        f"# first message: {len(first.blocks)} blocks, "
        f"{blocks.visible_chars(first.blocks)} visible characters; the whole answer goes up as "
        f"{first.attachment_name} ({len(first.attachment or '')} characters) in the thread",
        "", render_blocks(first.blocks), "",
        f"# after Details: {len(more.blocks)} blocks", "", render_blocks(more.blocks), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args(argv)
    for log in args.logs or DEFAULT:
        target = args.out / f"slack-answer-{log.stem}.txt"
        target.write_text(rendering(log), encoding="utf-8")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
