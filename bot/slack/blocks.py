"""Everything the bot shows in Slack, as Block Kit, within Slack's limits.

Limits (Slack's Block Kit and chat.postMessage references): 50 blocks per message (100 in App
Home), 3000 characters per section text, 150 per header, button `value` 2000, and an
undocumented cumulative ceiling of about 12k characters of block text (`msg_blocks_too_long`),
so replies budget 11k. What does not fit goes up as a text file in the thread, and the message
says so.

Outgoing mrkdwn escapes `&`, `<` and `>`, or a log line with `<pid>` or `a && b` would break the
formatting or turn into a mention. Fix commands sit in code blocks so they copy cleanly.
The arithmetic lines are `bot.render.text.numbers()`, the same lines the terminal shows.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.fmt import clip
from bot.render.text import cause_lines, headline, numbers, render
from bot.schema import Diagnosis

Block = dict[str, Any]

MAX_BLOCKS = 50
MAX_HOME_BLOCKS = 100
SECTION_MAX = 3000
HEADER_MAX = 150
BUTTON_TEXT_MAX = 75
TEXT_BUDGET = 11_000
FALLBACK_MAX = 3000
MAX_FIXES = 5

ACTION_COLLECT = "collect_host"
ACTION_FIXED = "fix_worked"
ACTION_WRONG = "wrong_diagnosis"
VIEW_WRONG = "wrong_diagnosis_note"
NOTE_BLOCK, NOTE_INPUT = "note", "note_input"


class Reply(BaseModel):
    """One message: fallback text (mrkdwn, escaped like the blocks), blocks, and material too
    long for blocks (a file)."""

    model_config = ConfigDict(extra="forbid")

    text: str
    blocks: list[Block] = Field(default_factory=list)
    attachment: str | None = None
    attachment_name: str = "diagnosis.txt"


def esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: str, limit: int = SECTION_MAX) -> str:
    """A mrkdwn code block holding `text` verbatim (escaped, fences neutralised, bounded)."""
    body = esc(text).replace("```", "`\u200b``")
    return "```" + clip(body, limit - 6) + "```"


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, SECTION_MAX)}}


def header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": clip(text, HEADER_MAX)}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(text, SECTION_MAX)}]}


def button(text: str, action_id: str, value: str, style: str | None = None) -> Block:
    b: Block = {"type": "button", "action_id": action_id, "value": value,
                "text": {"type": "plain_text", "text": clip(text, BUTTON_TEXT_MAX)}}
    if style:
        b["style"] = style
    return b


def message(text: str) -> Reply:
    """A plain answer (help, history, size, refusals, errors): one section per 3000 chars."""
    chunks = [text[i:i + SECTION_MAX] for i in range(0, len(text), SECTION_MAX)][:MAX_BLOCKS]
    return Reply(text=clip(text, FALLBACK_MAX), blocks=[section(c) for c in chunks])


def preformatted(title: str, body: str, filename: str) -> Reply:
    """A title and a block of text (history, sizing); long text goes up as a file."""
    if len(body) + len(title) <= TEXT_BUDGET - 100:
        chunks = [body[i:i + SECTION_MAX - 6] for i in range(0, len(body), SECTION_MAX - 6)]
        blocks = [section(title), *(section(code(c)) for c in chunks)]
        return Reply(text=clip(f"{title}\n{esc(body)}", FALLBACK_MAX), blocks=blocks)
    return Reply(text=title, blocks=[section(title), context("The full text is in the file "
                                                             "below.")],
                 attachment=body, attachment_name=filename)


def looking(what: str) -> Reply:
    return Reply(text=f"Looking at {esc(what)}…",
                 blocks=[context(f":mag: Looking at {esc(what)}…")])


def _size(blocks: list[Block]) -> int:
    return len(json.dumps(blocks))


def answer(d: Diagnosis, *, history_line: str | None, incident_id: int | None,
           host: str | None, can_collect_from: str | None) -> Reply:
    """The diagnosis in the thread: problem and proof, numbers, fixes, how to confirm, history.

    Buttons: "This fixed it" on each fix (needs the stored incident id), "Collect from HOST"
    when a host is known, "Wrong diagnosis". Values carry ids only; handlers re-check them.
    """
    head = headline(d)
    if head is None:
        return _no_match(d, history_line)
    must: list[Block] = [header(head.title)]
    summary = f"`{esc(head.label)}`"
    if head.summary:
        summary += "\n" + esc(head.summary)
    must.append(section(summary))
    proof = "\n".join(f"line {no}: {line}" if no is not None else line
                      for no, line in head.proof)
    if proof:
        must.append(section("*Proof*\n" + code(proof, SECTION_MAX - 10)))
    nums = numbers(d)
    if nums:
        must.append(section("*The numbers*\n" + code("\n".join(nums), SECTION_MAX - 16)))
    fixes = d.fixes[:MAX_FIXES]
    if fixes:
        must.append(section("*Fix it* (least disruptive first)"))
    for i, fx in enumerate(fixes, 1):
        text = f"{i}. *{esc(fx.title)}*\n{code(fx.command, 2000)}"
        if fx.predicted:
            text += f"\n→ {esc(fx.predicted)}"
        if not fx.computed:
            text += "\n_(example value: the evidence does not show the numbers)_"
        block = section(text)
        if incident_id is not None:
            block["accessory"] = button("This fixed it", ACTION_FIXED, f"{incident_id}:{fx.id}",
                                        "primary")
        must.append(block)
    optional: list[Block] = []
    if len(d.problems) > 1:
        also = ", ".join(f"`{p.id}` ({p.confidence:.2f})" for p in d.problems[1:6])
        optional.append(context(f"Also seen: {also}"))
    if d.notes:
        optional.append(context("\n".join(esc(n) for n in d.notes)))
    causes = cause_lines(d, host)
    if causes:
        optional.append(section("*Likely causes*\n" + "\n".join(esc(c) for c in causes)))
    if d.withheld_fixes:
        lines = [f"• {esc(w.title)}: {esc(w.reason)}" for w in d.withheld_fixes[:5]]
        optional.append(section("*Not proposed here*\n"
                                + "\n".join(lines)))
    if d.guide and d.guide.confirm:
        optional.append(section("*How to confirm*\n"
                                + "\n".join(f"• {esc(c)}" for c in d.guide.confirm[:8])))
    tail: list[Block] = []
    if history_line:
        tail.append(context(f":card_index_dividers: {esc(history_line)}"))
    actions = _actions(incident_id, can_collect_from)
    if actions:
        tail.append({"type": "actions", "block_id": "incident_actions", "elements": actions})
    tail.append(context(f"KB {esc(d.kb_version)} · fingerprint `{esc(d.fingerprint.digest)}`"
                        + (f" · incident {incident_id}" if incident_id is not None else "")
                        + (f" · host {esc(host)}" if host else "")))
    blocks = must + optional + tail
    attachment = None
    clipped = len(d.fixes) > MAX_FIXES or len(proof) > SECTION_MAX - 20
    if clipped or len(blocks) > MAX_BLOCKS or _size(blocks) > TEXT_BUDGET:
        more = context("More (causes, how to confirm, diagnostics) in the file below.")
        blocks = [*must, more, *tail]
        attachment = render(d)
    while len(blocks) > MAX_BLOCKS or _size(blocks) > TEXT_BUDGET:
        blocks.pop(len(blocks) - len(tail) - 1)
        attachment = render(d)
    fallback = esc(f"{head.title}: " + "; ".join(f.command for f in fixes[:2]))
    return Reply(text=clip(fallback, FALLBACK_MAX), blocks=blocks, attachment=attachment)


def _actions(incident_id: int | None, host: str | None) -> list[Block]:
    out: list[Block] = []
    if host:
        out.append(button(f"Collect from {host}", ACTION_COLLECT, host))
    if incident_id is not None:
        out.append(button("Wrong diagnosis", ACTION_WRONG, str(incident_id), "danger"))
    return out


def _no_match(d: Diagnosis, history_line: str | None) -> Reply:
    lines = ["*No known problem matched.*"]
    if d.input.note:
        lines.append(esc(d.input.note))
    lines.extend(esc(n) for n in d.notes)
    known = {k: v for k, v in d.facts.known().items() if k not in ("gpus", "processes")}
    if known:
        lines.append("What I could read:\n" + code("\n".join(f"{k}: {v}" for k, v in
                                                           known.items()), 2000))
    else:
        lines.append("Nothing in it looks like a vLLM, SGLang, TGI or GPU message I know. "
                     "Paste the error in a code block, attach the log, or `check HOST`.")
    blocks = [section("\n".join(lines))]
    if history_line:
        blocks.append(context(esc(history_line)))
    blocks.append(context(f"KB {esc(d.kb_version)}"))
    return Reply(text="No known problem matched.", blocks=blocks)


HELP = """*inferbot* diagnoses vLLM / SGLang / TGI failures. Mention me or use `/inferbot`:
• paste an error (a code block or a snippet file): the cause, the numbers, the fix
• `check HOST`: collect nvidia-smi, flags and logs from an inventory host, then diagnose
• `history [HOST|PROBLEM|MODEL] [since 7d] [words]`: what happened before
• `size MODEL on GPU [x2] [--tp 2] [--max-model-len 32768] [--concurrency 8] [fp8]`
• `resolve [INCIDENT] FIX` (in the incident's thread): record what fixed it
• `kb`: knowledge-base version and changes · `help`: this"""


def help_reply() -> Reply:
    return message(HELP)


def history_reply(title: str, body: str) -> Reply:
    return preformatted(title, body, "history.txt")


def kb_reply(version: str, content_hash: str, changelog: list[tuple[str, str, list[str]]]
             ) -> Reply:
    lines = [f"*Knowledge base {esc(version)}* (`{esc(content_hash)}`)"]
    for ver, date, changes in changelog[:5]:
        lines.append(f"*{esc(ver)}* ({esc(date)})")
        lines.extend(f"• {esc(c)}" for c in changes[:10])
    return message("\n".join(lines))


def feedback_modal(incident_id: int, channel: str, thread: str) -> Block:
    """The "Wrong diagnosis" modal; private_metadata carries where to answer."""
    meta = json.dumps({"incident_id": incident_id, "channel": channel, "thread": thread})
    return {
        "type": "modal", "callback_id": VIEW_WRONG, "private_metadata": meta,
        "title": {"type": "plain_text", "text": "Wrong diagnosis"},
        "submit": {"type": "plain_text", "text": "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            section(f"What was wrong with the diagnosis of incident {incident_id}? The note "
                    "goes to the knowledge-base maintainers."),
            {"type": "input", "block_id": NOTE_BLOCK,
             "label": {"type": "plain_text", "text": "Note"},
             "element": {"type": "plain_text_input", "action_id": NOTE_INPUT,
                         "multiline": True, "max_length": 3000}},
        ],
    }


def home_view(recent: list[str], recurring: list[str], kb_version: str,
              store_note: str | None) -> Block:
    """App Home: recent incidents, recurring fingerprints, the KB version."""
    blocks: list[Block] = [header("inferbot"), context(f"Knowledge base {esc(kb_version)}")]
    if store_note:
        blocks.append(section(f":warning: {esc(store_note)}"))
    blocks.append(section("*Recent incidents*"))
    blocks.extend(section(line) for line in recent[:30])
    if not recent:
        blocks.append(context("None recorded yet."))
    blocks.append({"type": "divider"})
    blocks.append(section("*Recurring* (same fingerprint, most often seen)"))
    blocks.extend(section(line) for line in recurring[:20])
    if not recurring:
        blocks.append(context("Nothing has recurred."))
    blocks.append({"type": "divider"})
    blocks.append(section(HELP))
    return {"type": "home", "blocks": blocks[:MAX_HOME_BLOCKS]}
