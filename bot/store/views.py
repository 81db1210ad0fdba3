"""What the store hands back (pydantic rows) and how history is shown (text and JSON).

Separate from the repository so the CLI and the Slack app can render stored data, and parse
`--since` and incident references, without importing SQLAlchemy.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from bot.fmt import clip

Status = Literal["open", "resolved"]


class RecordResult(BaseModel):
    """The outcome of `record()`: where the event went, and what the group says about it."""

    spooled: bool = False
    spool_path: str | None = None
    warning: str | None = None  # one line for stderr when the event was spooled
    incident_id: int | None = None  # the event id: what `inferbot resolve ID` takes
    group_id: int | None = None
    fingerprint: str = ""
    count: int | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    status: Status | None = None
    last_fix: str | None = None
    last_fixed_by: str | None = None
    last_fixed_at: datetime | None = None
    last_fix_note: str | None = None
    last_fix_link: str | None = None  # where the fix was recorded (a Slack permalink)
    drained: int = 0  # spooled entries written before this one
    already_recorded: bool = False  # the idempotency key was already in the database


class HistoryRow(BaseModel):
    """One stored event with its group's state, as `inferbot history` lists it."""

    incident_id: int
    group_id: int
    created_at: datetime
    source: str
    host: str | None
    model: str | None
    engine: str | None
    engine_version: str | None
    problem_id: str | None
    problem_title: str | None
    top_cause: str | None
    kb_version: str | None
    user: str | None
    channel: str | None
    thread: str | None
    excerpt: str
    status: Status
    count: int
    first_seen: datetime
    last_seen: datetime
    resolution_fix: str | None
    resolved_by: str | None
    resolved_at: datetime | None
    permalink: str | None = None  # the answer's Slack message
    resolution_link: str | None = None  # the answer the fix was recorded on
    corrections: int = 0  # "not right" notes people left on the failure


class GroupInfo(BaseModel):
    """A group, with why its events belong together (the fingerprint's inputs)."""

    group_id: int
    fingerprint: str
    grouped_by: dict[str, str]  # problem, signature (masked line), host, model
    problem_id: str | None
    host: str | None
    model: str | None
    engine: str | None
    engine_version: str | None
    kb_version: str | None
    first_seen: datetime
    last_seen: datetime
    count: int
    status: Status
    resolution_fix: str | None
    resolved_by: str | None
    resolved_at: datetime | None
    resolution_note: str | None
    resolution_link: str | None = None

    def explain(self) -> str:
        p = self.grouped_by
        return (
            f"group g{self.group_id} collects diagnoses with the same problem "
            f"({p['problem'] or 'none matched'}), the same signature line with numbers, paths, "
            f"PIDs, ids and timestamps masked ({p['signature'] or 'none'}), the same host "
            f"({p['host'] or 'unknown'}) and the same model ({p['model'] or 'unknown'})"
        )


_SINCE = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """'7d', '12h', '30m', '45s', '2w', or an ISO date / date-time (naive = UTC) -> aware UTC.

    Raises ValueError with a message fit for the user (the CLI exits 2 with it).
    """
    m = _SINCE.match(value)
    if m:
        now = now or datetime.now(UTC)
        return now - timedelta(**{_UNITS[m.group(2).lower()]: int(m.group(1))})
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            parsed = datetime.combine(date.fromisoformat(text), datetime.min.time())
        except ValueError:
            raise ValueError(
                f"--since {value!r}: expected a duration like 7d, 12h, 30m or an ISO date "
                "like 2026-11-30 or 2026-11-30T06:00"
            ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def parse_ref(ref: int | str) -> tuple[Literal["event", "group"], int]:
    """An incident reference: `12` (incident = event id) or `g3` / `group:3` (group id)."""
    if isinstance(ref, int):
        return "event", ref
    s = ref.strip().lower()
    m = re.fullmatch(r"(?:#|incident:?)?(\d{1,18})", s)
    if m:
        return "event", int(m.group(1))
    m = re.fullmatch(r"(?:g|group:?)(\d{1,18})", s)
    if m:
        return "group", int(m.group(1))
    raise ValueError(f"{ref!r}: expected an incident id like 12 or a group id like g3")


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if value else "?"


def status_words(r: HistoryRow) -> str:
    """The failure's state in one phrase: fixed (with what, by whom), or open (and what fixed
    it last time, if it came back after a fix); never both."""
    by = f" by {r.resolved_by}" if r.resolved_by else ""
    if r.status == "resolved":
        return f"fixed with {r.resolution_fix}{by}" if r.resolution_fix else "fixed"
    if r.resolution_fix:
        return f"open (back after a fix with {r.resolution_fix}{by})"
    return "open"


def format_history_text(rows: list[HistoryRow]) -> str:
    """Newest first, three lines per incident: what and where; its state, who asked where
    and the link to the answer; the excerpt's first line."""
    if not rows:
        return "no incidents match"
    out: list[str] = []
    for r in rows:
        out.append(
            f"#{r.incident_id}  {_when(r.created_at)}  {r.host or '-'}  "
            f"{r.problem_title or r.problem_id or 'no match'}  {r.model or '-'}  "
            f"{r.engine or ''}{' ' + r.engine_version if r.engine_version else ''}".rstrip()
        )
        where = " ".join(filter(None, [f"in {r.channel}" if r.channel else None,
                                       f"by {r.user}" if r.user else None]))
        notes = (f"; {r.corrections} note{'s' if r.corrections != 1 else ''}: not right"
                 if r.corrections else "")
        out.append(f"    {status_words(r)}; seen {r.count}x{notes}"
                   + (f"; {where}" if where else "")
                   + (f"; {r.permalink}" if r.permalink else ""))
        first = next((ln for ln in r.excerpt.splitlines() if ln.strip()), "")
        if first:
            out.append("    " + clip(" ".join(first.split()), 120))
    return "\n".join(out)


def format_history_json(rows: list[HistoryRow]) -> str:
    """A JSON array of rows (timestamps ISO 8601 UTC), for other tools."""
    payload: list[dict[str, Any]] = [r.model_dump(mode="json") for r in rows]
    return json.dumps(payload, indent=2)
