"""Turning text as it arrives (Slack, terminals, docker logs) into plain lines.

Slack escapes `< > &` as entities and wraps pastes in code fences; terminals and `docker logs`
carry ANSI colours (or, copied from a web page, their remains without ESC); Windows pastes
carry CR. None of that may hide a signature.
"""

from __future__ import annotations

from bot.lazyre import lazy

_ANSI = lazy(r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\x1b\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)")
# Colour codes whose ESC a copy from a web page dropped (" [36m(RayWorker pid=1) [0m"); a
# coloured line always resets, so "[0m" on the line says the rest are codes too.
# The code goes with the space before it where a space follows, and with the line's indent.
_ORPHAN_SGR = lazy(r"^\s{0,2}\[[0-9;]{1,12}m| ?\[[0-9;]{1,12}m(?= |$)|(?<!\[)\[[0-9;]{1,12}m")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))
_FENCE = lazy(r"^\s{0,8}```[A-Za-z0-9_+-]{0,20}\s{0,8}|```\s{0,8}$")

MAX_LINE_CHARS = 16 * 1024


def normalize_line(raw: str) -> str:
    """One line, cleaned. Kept short enough that every pattern runs in bounded time."""
    line = raw.rstrip("\r\n")
    if "\r" in line:
        # A progress bar rewrites the line with CR; the last rewrite is what a terminal shows.
        line = line.rsplit("\r", 1)[-1] or line.replace("\r", "")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[0m" in line:
        line = _ORPHAN_SGR.sub("", line)
    if "&" in line:
        for entity, char in _ENTITIES:
            line = line.replace(entity, char)
    if "```" in line:
        line = _FENCE.sub("", line)
    return line


def window(line: str, at: int, size: int = MAX_LINE_CHARS) -> str:
    """The part of an over-long line around position `at` (where an anchor was found)."""
    if len(line) <= size:
        return line
    start = max(0, min(at - size // 2, len(line) - size))
    return line[start : start + size]
