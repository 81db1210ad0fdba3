"""Every call the Slack app makes into the rest of inferbot, in one place.

The core (diagnose, KB), redaction, sizing and the chart, the collector and the incident store
are other people's modules; when one of their signatures changes, this file is the only one to
adjust. Nothing here knows about Slack.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.errors import one_line
from bot.schema import Diagnosis, Evidence

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from bot.kb.loader import KB
    from bot.sizing.calculators import SizeReport
    from bot.slack.parse import HistoryQuery, SizeQuery
    from bot.store.views import GroupInfo, HistoryRow, RecordResult


def redact(text: str) -> str:
    """Secrets out of anything posted or logged."""
    from bot.evidence.redact import redact as _redact

    return _redact(text)


@lru_cache(maxsize=1)
def kb() -> KB:
    from bot.kb.loader import load_kb

    return load_kb()


def diagnose_text(text: str, *, host: str | None, channel: str, thread: str,
                  user: str) -> Diagnosis:
    from bot.diagnose import diagnose

    evidence = Evidence(text=text, source="slack", host=host, channel=channel, thread=thread,
                        user=user)
    return diagnose(evidence, kb())


def collect_and_diagnose(host: str, *, channel: str, thread: str, user: str) -> Diagnosis:
    """`check HOST`: collect over SSH (inventory hosts only, read-only catalog) and diagnose."""
    from bot import metrics
    from bot.collect import CollectFailed, check

    try:
        return check(host, kb=kb(), channel=channel, thread=thread, user=user, source="slack")
    except CollectFailed:
        metrics.SSH_ERRORS.inc()
        raise


def size(q: SizeQuery) -> SizeReport:
    """`size MODEL on GPU ...`: the calculators. ValueError for an unknown model/GPU."""
    from bot.sizing.calculators import size as _size

    return _size(q.model, q.gpu, gpus=q.gpus, tp=q.tp, max_model_len=q.max_model_len,
                 concurrency=q.concurrency, kv_cache_dtype=q.kv_cache_dtype,
                 gpu_memory_utilization=q.gpu_memory_utilization)


def size_text(report: SizeReport) -> str:
    from bot.sizing.calculators import render_size_text

    return render_size_text(report)


def chart_png(source: Diagnosis | SizeReport) -> bytes | None:
    """The memory-budget chart as PNG bytes; None when there are no numbers to draw."""
    from bot.sizing.chart import chart_data, write_chart

    try:
        data = chart_data(source)
    except ValueError:
        return None
    with tempfile.TemporaryDirectory(prefix="inferbot-chart-") as tmp:
        path = Path(tmp) / "chart.png"
        write_chart(data, path)
        return path.read_bytes()


# --------------------------------------------------------------------------- the store

def store_down_errors() -> tuple[type[Exception], ...]:
    """What "the database is unavailable" looks like, for callers that answer anyway."""
    from bot.store import SchemaTooNew, StoreUnavailable

    return (StoreUnavailable, SchemaTooNew)


def store_engine(settings: Settings) -> Engine:
    """A ready engine (schema at HEAD) for the dedup table. Raises StoreUnavailable."""
    from bot.store import open_store

    return open_store(settings)


def database_problem(settings: Settings) -> str | None:
    """Why the database cannot be used right now (one line), or None when `SELECT 1` works.
    A cheap probe for /healthz: no migration, no spool drain."""
    from sqlalchemy import text

    from bot.store.db import StoreUnavailable, connectivity, get_engine

    try:
        with connectivity(), get_engine(settings.database_url).connect() as conn:
            conn.execute(text("SELECT 1"))
    except StoreUnavailable as exc:
        return one_line(exc)
    return None


def claim_key(key: str, settings: Settings, prune_before: datetime | None) -> bool:
    """INSERT the key into slack_event_keys: True for the first inserter anywhere, False when
    the unique constraint says another process (or replica) already has it. Rows older than
    `prune_before` are deleted in the same transaction. Raises StoreUnavailable."""
    from sqlalchemy import delete, insert
    from sqlalchemy.exc import IntegrityError

    from bot.store.db import connectivity
    from bot.store.db import write_engine as _write_engine
    from bot.store.tables import SlackEventKey

    engine = store_engine(settings)
    try:
        with connectivity(), _write_engine(engine).begin() as conn:
            if prune_before is not None:
                conn.execute(delete(SlackEventKey).where(SlackEventKey.created_at < prune_before))
            conn.execute(insert(SlackEventKey).values(key=key, created_at=datetime.now(UTC)))
    except IntegrityError:
        return False
    return True


def record(d: Diagnosis, *, settings: Settings, host: str | None, user: str, channel: str,
           thread: str) -> RecordResult:
    """Store the diagnosis (spooled, never lost, when the database is down)."""
    from bot.store import record as _record

    return _record(d, source="slack", host=host, user=user, channel=channel, thread=thread,
                   settings=settings)


def history(q: HistoryQuery, settings: Settings, limit: int = 10) -> list[HistoryRow]:
    from bot.store import history as _history

    return _history(host=q.host, problem=q.problem, model=q.model, since=q.since,
                    search=q.search, limit=limit, settings=settings)


def format_history(rows: list[HistoryRow]) -> str:
    from bot.store import format_history_text

    return format_history_text(rows)


def recent(settings: Settings, limit: int) -> list[HistoryRow]:
    from bot.store import history as _history

    return _history(limit=limit, settings=settings)


def thread_incident(settings: Settings, channel: str, thread: str) -> int | None:
    """The newest incident diagnosed in this thread (for `resolve` typed in the thread)."""
    from bot.store import history as _history

    for row in _history(since="30d", limit=500, settings=settings):
        if row.channel == channel and row.thread == thread:
            return row.incident_id
    return None


def resolve(ref: int | str, *, fix: str, who: str, settings: Settings) -> GroupInfo:
    from bot.store import resolve as _resolve

    return _resolve(ref, fix=fix, who=who, settings=settings)


def feedback(ref: int | str, *, note: str, who: str, settings: Settings) -> int:
    from bot.store import feedback as _feedback

    return _feedback(ref, note=note, who=who, settings=settings)


def incident_origin(incident_id: int, fix_id: str | None, settings: Settings
                    ) -> tuple[str | None, str | None] | None:
    """(the channel incident `incident_id` was diagnosed in, the command of its fix `fix_id`),
    or None when there is no such incident. A click names an incident and a fix; the text
    recorded, and the channel it must come from, are the store's, not the click's."""
    from sqlalchemy import select

    from bot.store.db import connectivity
    from bot.store.tables import IncidentEvent

    engine = store_engine(settings)
    with connectivity(), engine.connect() as conn:
        row = conn.execute(select(IncidentEvent.channel, IncidentEvent.fixes)
                           .where(IncidentEvent.id == incident_id)).first()
    if row is None:
        return None
    command = None
    for fix in row.fixes or []:
        if isinstance(fix, dict) and fix_id is not None and fix.get("id") == fix_id:
            command = str(fix.get("command") or fix.get("title") or fix_id)
    return row.channel, command
