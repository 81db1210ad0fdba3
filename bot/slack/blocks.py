"""Everything the bot shows in Slack, as Block Kit, within Slack's limits.

Limits (Slack's Block Kit and chat.postMessage references): 50 blocks per message (100 in App
Home), 3000 characters per section text, 150 per header, button `value` 2000, and an
undocumented cumulative ceiling of about 12k characters of block text (`msg_blocks_too_long`),
so replies budget 11k. What does not fit goes up as a text file in the thread, and the message
says so.

Outgoing mrkdwn escapes `&`, `<` and `>`, or a log line with `<pid>` or `a && b` would break the
formatting or turn into a mention. Fix commands sit in code blocks so they copy cleanly.
What an answer says is `bot.render.present`'s: the terminal shows the same sections.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bot.fmt import clip
from bot.render.present import History, Line, Link, Mention, Presentation, Section, present
from bot.render.text import render_presentation
from bot.schema import Diagnosis
from bot.structs import struct

Block = dict[str, Any]

MAX_BLOCKS = 50
MAX_HOME_BLOCKS = 100
SECTION_MAX = 3000
HEADER_MAX = 150
BUTTON_TEXT_MAX = 75
TEXT_BUDGET = 11_000
FALLBACK_MAX = 3000
FIRST_BLOCKS = 5  # the first screen, on a phone
FIRST_CHARS = 700

ACTION_DETAILS = "details"
ACTION_FIX_FAILED = "fix_failed"
ACTION_SHOW = "show_answer"
ACTION_SIZE_PICK = "size_pick"
OPTION_VALUE_MAX = 150  # Slack's limit on a menu option's value
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


# --------------------------------------------------------------------------- the answer

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,30}$")
_MARKUP = re.compile(r"```|<@([A-Z0-9]+)>|<[^|>]+\|([^>]+)>|[*_]")


def mrkdwn(line: Line) -> str:
    """A presentation line as mrkdwn: text escaped, a Slack user a real mention, a link a
    link."""
    out = []
    for part in line.parts:
        if isinstance(part, Mention):
            out.append(f"<@{part.user}>" if _SLACK_USER.match(part.user) else esc(f"@{part.user}"))
        elif isinstance(part, Link):
            out.append(f"<{esc(part.url)}|{esc(part.label)}>")
        else:
            out.append(esc(part))
    return "".join(out)


def _lines(lines: list[Line], limit: int = SECTION_MAX) -> str:
    """Lines as mrkdwn; runs of commands and quoted log lines in code blocks, whole."""
    out: list[str] = []
    run: list[str] = []
    for line in [*lines, Line.of("")]:
        if line.kind != "text" and line.parts != ("",):
            run.append(line.plain)
            continue
        if run:
            out.append(code("\n".join(run), limit))
            run = []
        if line.parts != ("",):
            out.append(mrkdwn(line))
    return "\n".join(out)


def _titled(s: Section, limit: int = SECTION_MAX - 100) -> str:
    body = _lines(s.lines, limit)
    return (f"*{esc(s.title)}*\n" if s.title else "") + body


def visible_chars(bs: list[Block]) -> int:
    """The characters a reader sees: block text without markup, button and menu labels."""
    total = 0
    for b in bs:
        texts = [b["text"]["text"]] if "text" in b else []
        for e in b.get("elements", []):
            if "text" in e:
                texts.append(e["text"] if isinstance(e["text"], str) else e["text"]["text"])
            if "placeholder" in e:
                texts.append(e["placeholder"]["text"])
        for t in texts:
            shown = _MARKUP.sub(lambda m: m.group(1) or m.group(2) or "", t)
            total += len(shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    return total


@struct(frozen=True, slots=True)
class Fixed:
    """The answer's incident was marked fixed from its own message: by whom, with what."""

    user: str
    command: str


def answer(d: Diagnosis, *, history: History | None, incident_id: int | None,
           host: str | None, can_collect_from: str | None, expanded: bool = False,
           fixed: Fixed | None = None, note: str | None = None) -> Reply:
    """The diagnosis in the thread. The first screen is at most FIRST_BLOCKS blocks and
    FIRST_CHARS visible characters: what broke with its key numbers, the history line, the
    command to run, why; then the actions: "Details" (expands the message in place), "This
    fixed it" (one menu of the proposed fixes), "Not right?", "Collect from HOST". The whole
    answer goes up as a file in the thread with the first message. Values carry ids only;
    handlers re-check them."""
    p = present(d, history, host=host)
    first = _first_screen(p, fixed)
    if note and len(first) < FIRST_BLOCKS - 1:  # what the bot could not read of the paste
        first.append(context(esc(note)))
    elif note:
        first[-1].setdefault("elements", []).append({"type": "mrkdwn", "text": esc(note)})
    actions = _answer_actions(p, incident_id, can_collect_from, expanded, fixed)
    row = [{"type": "actions", "block_id": "incident_actions", "elements": actions}
           ] if actions else []
    first = _within(first, visible_chars(row))
    details = _details(p, MAX_BLOCKS - len(first) - len(row), _size([*first, *row])
                       ) if expanded else []
    blocks = [*first, *details, *row]
    fallback = f"{p.title}: " + " ".join(
        line.plain for s in p.first if s.key == "fix" for line in s.lines[:1])
    full = render_presentation(p, full=True)
    return Reply(text=clip(esc(fallback), FALLBACK_MAX), blocks=blocks,
                 attachment=None if expanded or fixed else full)


def _first_screen(p: Presentation, fixed: Fixed | None) -> list[Block]:
    by = {s.key: s for s in p.first}
    head = f"*{esc(p.title)}*"
    if "headline" in by:
        head += "\n" + _lines(by["headline"].lines)
    out = [section(head)]
    if "history" in by:
        out.append(context(":card_index_dividers: " + _lines(by["history"].lines)))
    if fixed is not None:
        who = f"<@{fixed.user}>" if _SLACK_USER.match(fixed.user) else esc(fixed.user)
        out.append(section(f":white_check_mark: *Fixed* by {who} with {code(fixed.command, 600)}"))
    elif "fix" in by:
        out.append(section(_titled(by["fix"], 900)))
    elif "help" in by:
        out.append(section(_titled(by["help"])))
    if "why" in by:
        out.append(context(_titled(by["why"]).replace("*Why*\n", "*Why:* ", 1)))
    return out


def _within(out: list[Block], actions_chars: int) -> list[Block]:
    """Clip the prose (never a command) until the first screen fits FIRST_CHARS."""
    for i in [len(out) - 1, 0, 1]:
        over = visible_chars(out) + actions_chars - FIRST_CHARS
        if over <= 0:
            break
        b = out[i] if i < len(out) else None
        if b is None or "```" in json.dumps(b):
            continue
        key = "text" if "text" in b else None
        target = b["text"] if key else b["elements"][0]
        text = target["text"]
        target["text"] = clip(text, max(40, len(text) - over - 1))
    return out


def _details(p: Presentation, budget: int, used: int) -> list[Block]:
    """The sections behind "Details", each one block, within `budget` blocks and what the
    message has left of TEXT_BUDGET after `used`; what does not fit is in the file."""
    out: list[Block] = [{"type": "divider"}]
    rest = context("The rest is in the file in this thread.")
    for s in p.details:
        block = context(_titled(s)) if not s.title else section(_titled(s))
        if len(out) + 2 > budget or used + _size([*out, block, rest]) > TEXT_BUDGET:
            out.append(rest)
            break
        out.append(block)
    return out


def _answer_actions(p: Presentation, incident_id: int | None, host: str | None,
                    expanded: bool, fixed: Fixed | None) -> list[Block]:
    out: list[Block] = []
    if fixed is not None:  # the incident is over: the answer says who fixed it, and the
        return out         # whole answer stays in the file posted with it
    if incident_id is not None:
        out.append(button("Less" if expanded else "Details", ACTION_DETAILS,
                          f"{incident_id}:{'less' if expanded else 'more'}"))
        if p.choices:
            out.append({
                "type": "static_select", "action_id": ACTION_FIXED,
                "placeholder": {"type": "plain_text", "text": "This fixed it"},
                "options": [{"text": {"type": "plain_text",
                                      "text": clip(f"{i}. {c.label}", BUTTON_TEXT_MAX)},
                             "value": f"{incident_id}:{c.fix_id}"}
                            for i, c in enumerate(p.choices, 1)]})
    if host:
        out.append(button(f"Collect from {host}", ACTION_COLLECT, host))
    if incident_id is not None:
        out.append(button("Not right?", ACTION_WRONG, str(incident_id)))
    return out


def size_choices(kind: str, query: str, close: list[str], catalog: list[str],
                 asked: list[str]) -> Reply:
    """`size` named a model or GPU the catalogs do not know: the close matches as buttons, the
    catalog as a menu, or the model's own config.json pasted; each choice asks `size` again
    with the name replaced in the words `asked`."""
    def value(name: str) -> str:
        return " ".join(name if w == query else w for w in _replaced(asked, query))

    what = "model" if kind == "model" else "GPU"
    text = f"I do not know the {what} `{esc(query)}`."
    text += " Did you mean one of these?" if close else " Pick one the catalog has:"
    if kind == "model":
        text += ("\nOr paste the model's config.json: `size {…config.json…} on GPU` (it "
                 "holds the layers, heads and dtype the arithmetic needs).")
    elements: list[Block] = [button(clip(name, BUTTON_TEXT_MAX), ACTION_SIZE_PICK, value(name))
                             for name in close[:4] if len(value(name)) <= 2000]
    options = [{"text": {"type": "plain_text", "text": clip(name, BUTTON_TEXT_MAX)},
                "value": value(name)} for name in catalog
               if len(value(name)) <= OPTION_VALUE_MAX][:100]
    if options:
        elements.append({"type": "static_select", "action_id": ACTION_SIZE_PICK,
                         "placeholder": {"type": "plain_text", "text": f"All {what}s"},
                         "options": options})
    bs = [section(text)]
    if elements:
        bs.append({"type": "actions", "block_id": "size_choices", "elements": elements})
    return Reply(text=text, blocks=bs)


def _replaced(asked: list[str], query: str) -> list[str]:
    """The words of `asked` with the (possibly several-word) name `query` as one word."""
    words = query.split()
    for i in range(len(asked) - len(words) + 1):
        if [w.lower() for w in asked[i:i + len(words)]] == [w.lower() for w in words]:
            return [*asked[:i], query, *asked[i + len(words):]]
    return asked


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def repeat_reply(incident_id: int, pastes: int, fix_id: str | None,
                 permalink: str | None) -> Reply:
    """The same failure pasted again in its thread: one line, not a second answer."""
    ask = ": did fix 1 not work?" if fix_id else "."
    text = f"Same failure as above, {ordinal(pastes)} paste{ask}"
    elements: list[Block] = []
    if fix_id:
        elements.append(button("Mark fix 1 failed", ACTION_FIX_FAILED,
                               f"{incident_id}:{fix_id}", "danger"))
    if permalink:
        show = button("Show the answer", ACTION_SHOW, str(incident_id))
        show["url"] = permalink
        elements.append(show)
    bs = [context(esc(text))]
    if elements:
        bs.append({"type": "actions", "block_id": "repeat_actions", "elements": elements})
    return Reply(text=esc(text), blocks=bs)


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
    """The "Not right?" modal; private_metadata carries where to answer."""
    meta = json.dumps({"incident_id": incident_id, "channel": channel, "thread": thread})
    return {
        "type": "modal", "callback_id": VIEW_WRONG, "private_metadata": meta,
        "title": {"type": "plain_text", "text": "Not right?"},
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
