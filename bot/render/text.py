"""The answer in the terminal: the presentation's first screen (at most FIRST_LINES lines), or
all of it with `--full`; bold and colour only on a terminal that wants them, every line
wrapped to the width, evidence shown whole."""

from __future__ import annotations

import textwrap

from bot.render.present import History, Line, Presentation, present
from bot.schema import Diagnosis
from bot.structs import struct

FIRST_LINES = 12  # the first screen, history line included
DEFAULT_WIDTH = 100


@struct(frozen=True, slots=True)
class Style:
    """How the terminal shows emphasis: ANSI codes on a TTY (NO_COLOR unset), none piped."""

    color: bool = False
    width: int = DEFAULT_WIDTH

    def bold(self, text: str) -> str:
        return f"\033[1m{text}\033[0m" if self.color else text

    def command(self, text: str) -> str:
        return f"\033[32m{text}\033[0m" if self.color else text

    def dim(self, text: str) -> str:
        return f"\033[2m{text}\033[0m" if self.color else text


PLAIN = Style()


def _wrap(text: str, style: Style, indent: str, first: str | None = None) -> list[str]:
    lead = indent if first is None else first
    return textwrap.wrap(text, width=max(40, style.width), initial_indent=lead,
                         subsequent_indent=indent + ("    " if first is None else ""),
                         break_long_words=True, break_on_hyphens=False) or [lead.rstrip()]


def _line(line: Line, style: Style, indent: str) -> list[str]:
    text = line.plain
    if line.kind == "command":
        wrapped = _wrap(text, style, indent + "  ", indent + "$ ")
        return [style.command(w) for w in wrapped]
    return _wrap(text, style, indent)


def render_presentation(p: Presentation, *, full: bool = False, style: Style = PLAIN) -> str:
    out = [style.bold(t) for t in _wrap(p.title, style, "", "")]
    for s in p.first:
        if s.title:
            if s.key == "why" and len(s.lines) == 1:
                out.extend(_wrap(f"{style.bold('Why:')} {s.lines[0].plain}", style, ""))
                continue
            out.append(style.bold(s.title + ":"))
        for line in s.lines:
            out.extend(_line(line, style, "  "))
    details = p.details
    if not full:
        shown = [s.title.lower() for s in details if s.title][:3]
        more = [style.dim(t) for t in _wrap(
            f"More ({', '.join(shown)}, ...): inferbot diagnose --full", style, "", "")
                ] if shown else []
        return "\n".join([*out[:FIRST_LINES - len(more)], *more])
    for s in details:
        out.append("")
        if s.title:
            out.append(style.bold(s.title + ":"))
        for line in s.lines:
            out.extend(_line(line, style, "  " if s.title else ""))
    return "\n".join(out)


def render(d: Diagnosis, history: History | None = None, *, full: bool = False,
           style: Style = PLAIN) -> str:
    """The diagnosis as the terminal shows it (`full`: every section). The history line names
    the incident, as `inferbot resolve ID` and `history` take it."""
    p = present(d, history, host=d.host)
    if history is not None:
        for s in p.sections:
            if s.key == "history":
                s.lines = [Line((f"incident {history.incident_id}: ", *line.parts))
                           for line in s.lines]
    return render_presentation(p, full=full, style=style)
