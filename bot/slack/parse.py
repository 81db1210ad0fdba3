"""Text as Slack sends it -> what the user asked for.

Slack escapes `&`, `<` and `>` (and only those) and wraps mentions, channels and links in
`<...>` control sequences. The order matters: control sequences are resolved first, then the
three entities are decoded, so a user's literal `&lt;` is not mistaken for a control character.
Code fences arrive as raw triple backticks, with no language tag and often glued to the text.

The words outside the fences choose the verb (`check gpu-07`, `history 7d`, `size ... on ...`);
what is inside the fences, or the whole text when there is no verb, is the paste to diagnose.
Everything here is pure and bounded: linear regexes on text already capped in size.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Verb = Literal["paste", "check", "history", "size", "resolve", "help", "kb"]
VERBS: frozenset[str] = frozenset({"check", "history", "size", "resolve", "help", "kb"})

# <@U123>, <@U123|name>, <#C123|name>, <!here>, <!subteam^S123|@team>, <https://x|label>
_CONTROL = re.compile(r"<([@#!]?)([^<>|\n]{1,1000})(?:\|([^<>\n]{0,1000}))?>")
_FENCE = "```"
# The inventory's name shape (bot.collect.inventory): checked again there, exactly.
HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_DURATION = re.compile(r"^\d{1,4}[hdwm]$")
_PROBLEM_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)+$")
_DASHES = str.maketrans({"\u2014": "--", "\u2013": "--", "\u2212": "-"})


class Request(BaseModel):
    """One parsed message or slash command."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verb: Verb
    args: list[str] = Field(default_factory=list)  # the words after the verb
    paste: str = ""  # text to diagnose (fenced blocks, or the whole message)


class HistoryQuery(BaseModel):
    """`history [host H] [problem P] [model M] [since 7d] [TEXT]`, bare words guessed by shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str | None = None
    problem: str | None = None
    model: str | None = None
    since: str | None = None
    search: str | None = None


class SizeQuery(BaseModel):
    """`size MODEL on GPU [xN] [--tp N] [--max-model-len L] [--concurrency C] [fp8] ...`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    gpu: str
    gpus: int | None = None
    tp: int | None = Field(default=None, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=1)
    concurrency: int | None = Field(default=None, ge=1)
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)


class ParseError(ValueError):
    """The words do not make a valid request; the message says how to write it."""


def _control(match: re.Match[str], bot_user_id: str | None) -> str:
    sigil, target, label = match.group(1), match.group(2), match.group(3)
    if sigil == "@":
        return "" if target == bot_user_id else f"@{label or target}"
    if sigil == "#":
        return f"#{label or target}"
    if sigil == "!":
        if label:
            return label
        return f"@{target.split('^', 1)[0]}"
    # A link. Slack auto-links bare host names and URLs in pasted logs; the URL is the text.
    if label and label not in target:
        return f"{label} ({target})"
    return target if not target.startswith("mailto:") else target[len("mailto:"):]


def unescape(text: str) -> str:
    """Decode Slack's three entities (and only them; `&amp;` last so `&amp;lt;` stays `&lt;`)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def plain_text(text: str, bot_user_id: str | None = None) -> str:
    """Slack message text -> the text the user typed, minus the bot's own mention."""
    resolved = _CONTROL.sub(lambda m: _control(m, bot_user_id), text)
    return unescape(resolved)


def split_fences(text: str) -> tuple[str, list[str]]:
    """(the words outside code fences, the fenced blocks). An unclosed fence runs to the end."""
    parts = text.split(_FENCE)
    outside = " ".join(parts[0::2]).strip()
    blocks = [p.strip("\n") for p in parts[1::2] if p.strip()]
    return outside, blocks


def parse(text: str, bot_user_id: str | None = None, has_files: bool = False) -> Request:
    """A message (or slash-command text) -> a Request. Slack escaping is resolved here."""
    plain = plain_text(text, bot_user_id)
    outside, blocks = split_fences(plain)
    words = outside.split()
    first = words[0].lower().rstrip(":,") if words else ""
    if first in VERBS:
        return Request(verb=first, args=words[1:],
                       paste="\n".join(blocks))
    if blocks:
        return Request(verb="paste", paste="\n".join(blocks))
    if plain.strip() or has_files:
        return Request(verb="paste", paste=plain.strip())
    return Request(verb="help")


def history_query(args: list[str]) -> HistoryQuery:
    """Words after `history`: `host X`, `problem X`, `model X`, `since 7d`, or bare words.

    A bare duration (`7d`, `24h`) is `since`; a KB-style id (`kv-cache-no-blocks`) a problem;
    `org/name` a model; a word with a digit (`gpu-07`) a host; other words a text search.
    """
    fields: dict[str, str] = {}
    bare: list[str] = []
    it = iter(args)
    for word in it:
        key = word.lower().rstrip(":=")
        if key in ("host", "problem", "model", "since", "search", "text"):
            value = next(it, None)
            if value is None:
                raise ParseError(f"`history {key}` needs a value, e.g. `history {key} "
                                 f"{_EXAMPLES[key]}`")
            fields["search" if key == "text" else key] = value
        elif "=" in word and word.split("=", 1)[0].lower() in ("host", "problem", "model",
                                                                  "since"):
            k, v = word.split("=", 1)
            fields[k.lower()] = v
        else:
            bare.append(word)
    durations = [w for w in bare if _DURATION.match(w)]
    if durations and "since" not in fields:
        fields["since"] = durations[0]
        bare.remove(durations[0])
    if len(bare) == 1:
        guess = _guess_field(bare[0])
        if guess not in fields:
            fields[guess] = bare[0]
            bare = []
    if bare:
        fields["search"] = " ".join(bare)
    if "host" in fields and not HOST_RE.match(fields["host"]):
        raise ParseError(f"{fields['host']!r} is not a host name")
    if "since" in fields and not _DURATION.match(fields["since"]):
        raise ParseError("`since` takes a duration like 24h, 7d, 2w or 3m")
    return HistoryQuery.model_validate(fields)


def _guess_field(word: str) -> str:
    if "/" in word:
        return "model"
    if _PROBLEM_ID.match(word) and not any(ch.isdigit() for ch in word):
        return "problem"
    return "host" if HOST_RE.match(word) and any(ch.isdigit() for ch in word) else "search"


_EXAMPLES = {"host": "gpu-07", "problem": "kv-cache-no-blocks", "model": "meta-llama/Llama-3.1-8B",
             "since": "7d", "search": "max_model_len", "text": "max_model_len"}

_SIZE_FLAGS: dict[str, str] = {
    "--tp": "tp", "--tensor-parallel-size": "tp", "tp": "tp",
    "--gpus": "gpus", "gpus": "gpus",
    "--max-model-len": "max_model_len", "len": "max_model_len", "max-model-len": "max_model_len",
    "--concurrency": "concurrency", "concurrency": "concurrency",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "utilization": "gpu_memory_utilization",
}
_GPU_COUNT = re.compile(r"^(?:x(\d{1,2})|(\d{1,2})x)$", re.IGNORECASE)
SIZE_USAGE = ("`size MODEL on GPU [x2] [--tp 2] [--max-model-len 32768] [--concurrency 8] "
              "[--kv-cache-dtype fp8] [--gpu-memory-utilization 0.9]`, e.g. "
              "`size meta-llama/Llama-3.1-8B on H100`")


def size_query(args: list[str]) -> SizeQuery:
    """Words after `size` -> a SizeQuery. Typographic dashes (Slack clients) count as `--`."""
    words = [w.translate(_DASHES) for w in args]
    lowered = [w.lower() for w in words]
    if "on" not in lowered or lowered.index("on") == 0 or lowered.index("on") == len(words) - 1:
        raise ParseError(f"usage: {SIZE_USAGE}")
    on = lowered.index("on")
    model = " ".join(words[:on])
    rest = words[on + 1:]
    gpu_words: list[str] = []
    fields: dict[str, str] = {}
    i = 0
    while i < len(rest):
        word, key = rest[i], rest[i].lower()
        count = _GPU_COUNT.match(word)
        if "=" in key and key.split("=", 1)[0] in _SIZE_FLAGS:
            flag, value = word.split("=", 1)
            fields[_SIZE_FLAGS[flag.lower()]] = value
        elif key in _SIZE_FLAGS:
            if i + 1 >= len(rest):
                raise ParseError(f"{word} needs a value; usage: {SIZE_USAGE}")
            fields[_SIZE_FLAGS[key]] = rest[i + 1]
            i += 1
        elif key in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            fields["kv_cache_dtype"] = key
        elif count:
            fields["gpus"] = count.group(1) or count.group(2)
        elif key.startswith("--"):
            raise ParseError(f"unknown option {word}; usage: {SIZE_USAGE}")
        else:
            gpu_words.append(word)
        i += 1
    if not gpu_words:
        raise ParseError(f"which GPU? usage: {SIZE_USAGE}")
    try:
        return SizeQuery.model_validate({"model": model, "gpu": " ".join(gpu_words), **fields})
    except ValueError as exc:
        raise ParseError(f"{_first_error(exc)}; usage: {SIZE_USAGE}") from None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


def host_arg(args: list[str]) -> str:
    """The one host name after `check` (the inventory decides whether it is known)."""
    if len(args) != 1 or not HOST_RE.match(args[0]):
        raise ParseError("usage: `check HOST`, e.g. `check gpu-07` (a host from the inventory)")
    return args[0]
