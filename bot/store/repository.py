"""The incident repository: the only code that reads and writes incidents.

Every adapter (CLI, Slack, collector) goes through these functions, so grouping, spooling and
idempotency behave the same whoever records. Each public function opens the database for the
given Settings (its schema created on first use; one behind this inferbot's is migrated by
`upgrade` and `prepare` only, see `db.ensure_schema`), first writes any spooled entries, then
does its work in one short transaction.

Concurrency: the group row is written with one `INSERT ... ON CONFLICT (fingerprint) DO UPDATE
... RETURNING` (SQLite >= 3.35 and PostgreSQL alike), so two writers of the same incident
never create two groups and the count is exact; the event insert is in the same transaction,
so a failed event never leaves a counted-but-missing occurrence.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    and_,
    case,
    column,
    delete,
    func,
    insert,
    select,
    table,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError

from bot.config import Settings, get_settings
from bot.errors import one_line
from bot.logs import describe_exception
from bot.schema import CommandRun, Diagnosis, Source, to_data
from bot.store import spool
from bot.store.db import (
    SchemaBehind,
    SchemaTooNew,
    StoreUnavailable,
    connectivity,
    ensure_schema,
    get_engine,
    migrate,
    within,
    write_engine,
)
from bot.store.search import Search, compact, fts5_match, pg_search_ids, search_terms
from bot.store.tables import (
    EXCERPT_MAX_CHARS,
    FTS_TABLE,
    CommandAudit,
    Feedback,
    IncidentEvent,
    IncidentGroup,
    SlackEventKey,
)
from bot.store.views import GroupInfo, HistoryRow, RecordResult, parse_ref, parse_since
from bot.structs import struct

log = logging.getLogger(__name__)
T = TypeVar("T")

HISTORY_LIMIT = 50
_LOCK_RETRIES = 8


def _now() -> datetime:
    return datetime.now(UTC)


def _settings(settings: Settings | None) -> Settings:
    return settings if settings is not None else get_settings()


# --------------------------------------------------------------------------- opening


def open_store(settings: Settings | None = None, *, upgrade: bool = False) -> Engine:
    """The engine for `settings`, schema at HEAD (a schema behind it migrated only with
    `upgrade`), spool drained. Raises StoreUnavailable (SchemaBehind), SchemaTooNew."""
    s = _settings(settings)
    with connectivity():
        engine = get_engine(s.database_url)
    ensure_schema(engine, upgrade=upgrade)
    try:
        drain(engine, s)
    except StoreUnavailable as exc:
        # a database that reads but cannot be written (read-only, disk full): reading goes
        # on; the spool waits for a database that takes writes
        log.info("spool not drained: %s", exc)
    return engine


def _bounded(settings: Settings | None, fn: Callable[[Engine], T]) -> T:
    """`fn(engine)` on the opened store within the database deadline (INFERBOT_DB_DEADLINE_S),
    for the calls a Slack answer waits on: a hung database costs one deadline, and while the
    call is still stuck the next ones fail at once (bot.store.db.within). StoreUnavailable."""
    s = _settings(settings)
    return within(s.database_url, s.db_deadline_s, lambda: fn(open_store(s)))


def prepare(settings: Settings | None = None) -> None:
    """Before `inferbot serve` takes requests: the schema migrated if it is behind (nothing
    waits on it yet) and the spool drained, within the database deadline. Past it the work
    goes on on its own thread, and until it is done every store call fails at once (answers
    go out, incidents are spooled). Raises StoreUnavailable, SchemaTooNew."""
    s = _settings(settings)
    within(s.database_url, s.db_deadline_s, lambda: open_store(s, upgrade=True))


def upgrade(settings: Settings | None = None) -> str | None:
    """`inferbot db upgrade`: migrate to HEAD now (first use does this too), then compact the
    text index (worth running now and then on a big store); the new revision."""
    s = _settings(settings)
    with connectivity():
        engine = get_engine(s.database_url)
        rev = migrate(engine, "head")
    ensure_schema(engine)
    drain(engine, s)
    with connectivity():
        _retry_locked(lambda: _compact(engine))
    return rev


def _compact(engine: Engine) -> None:
    with write_engine(engine).begin() as conn:
        compact(conn)


def _retry_locked(fn: Callable[[], T]) -> T:
    """Run `fn`, retrying when SQLite's write lock stays busy past the busy timeout.

    The busy timeout already queues writers; this is the belt to those braces for the rare
    SQLITE_BUSY that SQLite returns without waiting (e.g. a checkpoint racing a writer).
    """
    for attempt in range(_LOCK_RETRIES):
        try:
            return fn()
        except OperationalError as exc:
            msg = str(exc.orig).lower()
            if attempt + 1 == _LOCK_RETRIES or ("locked" not in msg and "busy" not in msg):
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- recording


def _cap(text_: str | None, limit: int = EXCERPT_MAX_CHARS) -> str:
    text_ = text_ or ""
    return text_ if len(text_) <= limit else text_[: limit - 1] + "…"


def build_entry(
    diagnosis: Diagnosis,
    *,
    source: Source | str,
    user: str | None,
    channel: str | None,
    thread: str | None,
    excerpt: str,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The rows to write, as plain JSON data: what is spooled and what is inserted.

    Built once, before the database is touched, so a spooled event is byte-for-byte the event
    that would have been written, and its idempotency key is fixed from the start. The group
    is the diagnosis's own fingerprint: the core computed it, the store only keeps it.
    """
    facts = diagnosis.facts
    key = diagnosis.fingerprint
    created = (created_at or _now()).astimezone(UTC).isoformat()
    excerpt = _cap(excerpt or diagnosis.excerpt)
    labels = " ".join(
        [f"{p.id} {p.title}" for p in diagnosis.problems]
        + [f"{c.id} {c.title}" for c in diagnosis.causes]
    )
    uid = str(uuid.uuid4())
    event = {
        "event_uid": uid,
        "created_at": created,
        "source": str(source),
        "channel": channel,
        "thread": thread,
        "user_name": user,
        "host": key.host,
        "model": facts.model,
        "engine": facts.engine,
        "engine_version": facts.engine_version,
        "problem_id": key.problem,
        "fingerprint": key.digest,
        "kb_version": diagnosis.kb_version,
        "problems": [to_data(p) for p in diagnosis.problems],
        "causes": [to_data(c) for c in diagnosis.causes],
        "facts": facts.known(),
        "fixes": [to_data(f) for f in diagnosis.fixes],
        "excerpt": excerpt,
        "labels": labels,
        "diagnosis": to_data(diagnosis),
    }
    group = {
        "fingerprint": key.digest,
        "problem_id": key.problem,
        "signature": key.signature,
        "host": key.host,
        "model": key.model,
        "engine": facts.engine,
        "engine_version": facts.engine_version,
        "kb_version": diagnosis.kb_version,
    }
    return {"kind": "event", "uid": uid, "created_at": created, "event": event, "group": group}


def record(
    diagnosis: Diagnosis,
    *,
    source: Source | str,
    user: str | None = None,
    channel: str | None = None,
    thread: str | None = None,
    excerpt: str = "",
    settings: Settings | None = None,
    created_at: datetime | None = None,
) -> RecordResult:
    """Store one diagnosis as an event of its incident group; never loses it.

    If the database is unreachable (or its schema is newer than this inferbot), the event is
    spooled and the result says so (`spooled=True`, `warning` is the one line to print); the
    next successful connection writes it. Other errors (bugs) propagate.
    """
    s = _settings(settings)
    entry = build_entry(
        diagnosis,
        source=source,
        user=user,
        channel=channel,
        thread=thread,
        excerpt=excerpt,
        created_at=created_at,
    )

    def store() -> RecordResult:
        with connectivity():
            engine = get_engine(s.database_url)
            ensure_schema(engine)
        drained = drain(engine, s)
        with connectivity():
            result = _write_event(engine, entry)
        return result.model_copy(update={"drained": drained})

    try:
        return within(s.database_url, s.db_deadline_s, store)
    except (StoreUnavailable, SchemaTooNew) as exc:
        try:
            path = spool.write(s.spool_dir, entry)
        except OSError as err:  # read-only or full there too: say so, never lose it quietly
            raise StoreUnavailable(
                f"database unavailable ({exc}) and the spool {s.spool_dir} cannot be written "
                f"({one_line(err, typed=True)})") from None
        if isinstance(exc, SchemaBehind):  # no connection writes it until the upgrade
            warning = f"incident not stored yet: {exc}, which stores it (spooled to {path})"
        else:
            warning = (f"incident not stored yet: database unavailable ({exc}); spooled to "
                       f"{path}, it is written on the next successful connection")
        return RecordResult(spooled=True, spool_path=str(path),
                            fingerprint=entry["group"]["fingerprint"], warning=warning)


def _upsert_group(conn: Connection, group: dict[str, Any], seen: datetime) -> Row[Any]:
    G = IncidentGroup
    latest: Any
    earliest: Any
    if conn.dialect.name == "postgresql":
        stmt: Any = postgresql.insert(G)
        latest, earliest = func.greatest, func.least
    else:
        stmt = sqlite.insert(G)
        latest, earliest = func.max, func.min  # SQLite's scalar (two-argument) forms
    stmt = stmt.values(**group, first_seen=seen, last_seen=seen, count=1, status="open")
    new = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=[G.fingerprint],
        set_={
            "count": G.count + 1,
            "first_seen": earliest(G.first_seen, new.first_seen),
            "last_seen": latest(G.last_seen, new.last_seen),
            # A recurrence after the fix reopens the incident; a late (spooled) event from
            # before the fix does not. The resolution stays: "last fixed by" is still true.
            "status": case(
                (and_(G.status == "resolved", G.resolved_at < new.last_seen), "open"),
                else_=G.status,
            ),
            "engine": func.coalesce(new.engine, G.engine),
            "engine_version": func.coalesce(new.engine_version, G.engine_version),
            "kb_version": func.coalesce(new.kb_version, G.kb_version),
        },
    ).returning(*_GROUP_COLUMNS)
    row: Row[Any] = conn.execute(stmt).one()
    return row


_GROUP_COLUMNS = (
    IncidentGroup.id,
    IncidentGroup.count,
    IncidentGroup.first_seen,
    IncidentGroup.last_seen,
    IncidentGroup.status,
    IncidentGroup.resolution_fix,
    IncidentGroup.resolved_by,
    IncidentGroup.resolved_at,
    IncidentGroup.resolution_note,
)


def _fix_link(conn: Connection, g: Any) -> str | None:
    """Where the group's fix was recorded; asked only when there is a fix, so a store not
    yet migrated to 0005 can still be written by the drain that migrates it."""
    if not g.resolution_fix:
        return None
    found = conn.execute(select(IncidentGroup.resolution_link)
                         .where(IncidentGroup.id == g.id)).scalar()
    return str(found) if found else None


def _result(event_id: int, fp: str, g: Any, *, link: str | None = None,
            already: bool = False) -> RecordResult:
    return RecordResult(
        incident_id=event_id,
        group_id=g.id,
        fingerprint=fp,
        count=g.count,
        first_seen=g.first_seen,
        last_seen=g.last_seen,
        status=g.status,
        last_fix=g.resolution_fix,
        last_fixed_by=g.resolved_by,
        last_fixed_at=g.resolved_at,
        last_fix_note=g.resolution_note,
        last_fix_link=link,
        already_recorded=already,
    )


def _existing_event(conn: Connection, uid: str) -> RecordResult | None:
    E, G = IncidentEvent, IncidentGroup
    row = conn.execute(
        select(E.id, E.fingerprint, *_GROUP_COLUMNS)
        .join(G, G.id == E.group_id)
        .where(E.event_uid == uid)
    ).first()
    if row is None:
        return None
    return _result(row[0], row[1], row, link=_fix_link(conn, row), already=True)


def _write_event(engine: Engine, entry: dict[str, Any]) -> RecordResult:
    event = dict(entry["event"])
    event["created_at"] = datetime.fromisoformat(event["created_at"])
    uid = event["event_uid"]

    def attempt() -> RecordResult:
        with write_engine(engine).begin() as conn:
            found = _existing_event(conn, uid)
            if found is not None:  # written before a crash, or by a racing drain
                return found
            g = _upsert_group(conn, entry["group"], event["created_at"])
            event_id = conn.execute(
                insert(IncidentEvent)
                .values(**event, group_id=g.id, recorded_at=_now())
                .returning(IncidentEvent.id)
            ).scalar_one()
            return _result(event_id, event["fingerprint"], g, link=_fix_link(conn, g))

    try:
        return _retry_locked(attempt)
    except IntegrityError:
        # A racing writer inserted the same event_uid first (its transaction won; ours, with
        # its group increment, rolled back). The event exists exactly once: report it.
        with engine.connect() as conn:
            found = _existing_event(conn, uid)
        if found is None:
            raise
        return found


# --------------------------------------------------------------------------- command audit


def record_command(
    *,
    host: str,
    command_id: str,
    duration_s: float,
    exit_code: int | None,
    bytes_out: int,
    error: str | None = None,
    run_id: str | None = None,
    who: str | None = None,
    created_at: datetime | None = None,
    settings: Settings | None = None,
) -> int | None:
    """Audit one remote command (exit_code None = killed / timed out). Returns the row id, or
    None when the database was unreachable and the row was spooled."""
    s = _settings(settings)
    created = (created_at or _now()).astimezone(UTC).isoformat()
    uid = str(uuid.uuid4())
    entry = {
        "kind": "command",
        "uid": uid,
        "created_at": created,
        "command": {
            "audit_uid": uid,
            "created_at": created,
            "host": host,
            "command_id": command_id,
            "duration_s": float(duration_s),
            "exit_code": exit_code,
            "bytes_out": int(bytes_out),
            "error": _cap(error, 4000) if error else None,
            "run_id": run_id,
            "who": who,
        },
    }

    def store() -> int:
        engine = open_store(s)
        with connectivity():
            return _write_command(engine, entry)

    try:
        return within(s.database_url, s.db_deadline_s, store)
    except (StoreUnavailable, SchemaTooNew) as exc:
        path = spool.write(s.spool_dir, entry)
        log.warning("command audit spooled to %s: %s", path, exc)
        return None


def record_commands(runs: Sequence[CommandRun], *, settings: Settings | None = None) -> None:
    """Audit each command a check ran (spooled, like every row, while the database is down)."""
    for run in runs:
        record_command(host=run.host, command_id=run.command_id, duration_s=run.duration_s,
                       exit_code=run.exit_code, bytes_out=run.bytes_out, error=run.error,
                       run_id=run.run_id, who=run.who, settings=settings)


def _write_command(engine: Engine, entry: dict[str, Any]) -> int:
    row = dict(entry["command"])
    row["created_at"] = datetime.fromisoformat(row["created_at"])
    A = CommandAudit

    def attempt() -> int:
        with write_engine(engine).begin() as conn:
            found = conn.execute(select(A.id).where(A.audit_uid == row["audit_uid"])).scalar()
            if found is not None:
                return int(found)
            return int(conn.execute(insert(A).values(**row).returning(A.id)).scalar_one())

    try:
        return _retry_locked(attempt)
    except IntegrityError:
        with engine.connect() as conn:
            found = conn.execute(select(A.id).where(A.audit_uid == row["audit_uid"])).scalar()
        if found is None:
            raise
        return int(found)


# --------------------------------------------------------------------------- the spool


def drain(engine: Engine, settings: Settings | None = None) -> int:
    """Write every spooled entry, oldest first; returns how many were written (or found
    already written). Stops with StoreUnavailable if the database goes away mid-way; the rest
    stay spooled. An entry the database rejects for another reason is moved to `bad/`."""
    s = _settings(settings)
    paths = spool.pending(s.spool_dir)
    if not paths:
        return 0
    done = 0
    with spool.drain_lock(s.spool_dir) as mine:
        if not mine:
            return 0  # another process is draining these very files
        for path in spool.pending(s.spool_dir):
            try:
                entry = spool.read(path)
            except FileNotFoundError:
                continue
            except ValueError as exc:  # includes JSONDecodeError
                log.warning("unreadable spool entry %s moved aside: %s", path, exc)
                spool.quarantine(path)
                continue
            try:
                with connectivity():
                    if entry["kind"] == "event":
                        _write_event(engine, entry)
                    elif entry["kind"] == "command":
                        _write_command(engine, entry)
                    else:
                        raise ValueError(f"unknown spool entry kind {entry['kind']!r}")
            except (SQLAlchemyError, ValueError, KeyError, TypeError) as exc:
                # the first line only: SQLAlchemy appends the statement's parameters (an
                # incident's excerpt) to its message
                log.warning("spool entry %s rejected, moved aside: %s", path,
                            describe_exception(exc))
                spool.quarantine(path)
                continue
            path.unlink(missing_ok=True)
            done += 1
    return done


# --------------------------------------------------------------------------- history


def history(
    *,
    host: str | None = None,
    problem: str | None = None,
    model: str | None = None,
    engine_version: str | None = None,
    status: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    search: str | None = None,
    group_id: int | None = None,
    limit: int = HISTORY_LIMIT,
    settings: Settings | None = None,
) -> list[HistoryRow]:
    """Stored incidents, newest first, filtered; `search` is full-text over the excerpt and the
    problem and cause names (every word must appear). `since`/`until` take '7d', '12h', '30m' or
    an ISO date. With `search`, "newest" is the order of recording (the text index's order,
    which keeps searches fast on millions of rows); otherwise it is the diagnosis time.
    Within the database deadline: Slack's `history` and App Home wait on it. Raises
    ValueError for a bad filter, StoreUnavailable when the database is down or hangs."""
    if status is not None and status not in ("open", "resolved"):
        raise ValueError(f"--status {status!r}: expected open or resolved")
    E, G = IncidentEvent, IncidentGroup
    stmt = select(
        E.id,
        E.group_id,
        E.created_at,
        E.source,
        E.host,
        E.model,
        E.engine,
        E.engine_version,
        E.problem_id,
        E.problems,
        E.causes,
        E.kb_version,
        E.user_name,
        E.channel,
        E.thread,
        E.excerpt,
        E.permalink,
        G.status,
        G.count,
        G.first_seen,
        G.last_seen,
        G.resolution_fix,
        G.resolved_by,
        G.resolved_at,
        G.resolution_link,
        select(func.count()).select_from(Feedback)
        .where(Feedback.group_id == G.id, Feedback.kind == WRONG)
        .scalar_subquery().label("corrections"),
    )
    where: list[ColumnElement[bool]] = []
    found = Search(search_terms(search or ""))
    equal = {"host": (E.host, host and host.strip().lower()),
             "problem": (E.problem_id, problem and problem.strip()),
             "model": (E.model, model and model.strip()),
             "engine_version": (E.engine_version, engine_version and engine_version.strip())}
    for kind, (col, value) in equal.items():
        if value:
            where.append(col == value)
            found.filter(kind, value)
    if status:
        where.append(G.status == status)
    if group_id is not None:
        where.append(E.group_id == group_id)
    if since is not None:
        found.since = parse_since(since) if isinstance(since, str) else since
        where.append(E.created_at >= found.since)
    if until is not None:
        found.until = parse_since(until) if isinstance(until, str) else until
        where.append(E.created_at < found.until)
    stmt = stmt.join(G, G.id == E.group_id).where(*where)
    if search and search.strip() and not found.terms:
        return []  # only punctuation: no token can match
    limit = max(1, min(limit, 10_000))

    def ordered(conn: Connection) -> Select[Any]:
        if found.terms and conn.dialect.name == "sqlite":
            # FTS5 walks its index newest rowid first and stops at the limit.
            fts = table(FTS_TABLE, column("rowid"))
            return (stmt.join(fts, fts.c.rowid == E.id).where(fts5_match(found, conn))
                    .order_by(fts.c.rowid.desc()).limit(limit))
        if found.terms:
            ids = pg_search_ids(conn, where, found, limit, join=status is not None)
            return stmt.where(E.id.in_(ids)).order_by(E.id.desc())
        return stmt.order_by(E.created_at.desc(), E.id.desc()).limit(limit)

    def query(engine: Engine) -> list[HistoryRow]:
        with connectivity(), engine.connect() as conn:
            return [_history_row(r) for r in conn.execute(ordered(conn)).all()]

    return _bounded(settings, query)


def _history_row(r: Row[Any]) -> HistoryRow:
    problems = r.problems or []
    causes = r.causes or []
    return HistoryRow(
        incident_id=r.id,
        group_id=r.group_id,
        created_at=r.created_at,
        source=r.source,
        host=r.host or None,
        model=r.model,
        engine=r.engine,
        engine_version=r.engine_version,
        problem_id=r.problem_id or None,
        problem_title=problems[0].get("title") if problems else None,
        top_cause=causes[0].get("id") if causes else None,
        kb_version=r.kb_version,
        user=r.user_name,
        channel=r.channel,
        thread=r.thread,
        excerpt=r.excerpt,
        status=r.status,
        count=r.count,
        first_seen=r.first_seen,
        last_seen=r.last_seen,
        resolution_fix=r.resolution_fix,
        resolved_by=r.resolved_by,
        resolved_at=r.resolved_at,
        permalink=r.permalink,
        resolution_link=r.resolution_link,
        corrections=r.corrections,
    )


# --------------------------------------------------------------------------- groups


def _group_id(conn: Connection, ref: int | str) -> int:
    kind, n = parse_ref(ref)
    if kind == "group":
        found = conn.execute(select(IncidentGroup.id).where(IncidentGroup.id == n)).scalar()
    else:
        found = conn.execute(select(IncidentEvent.group_id).where(IncidentEvent.id == n)).scalar()
    if found is None:
        label = f"group g{n}" if kind == "group" else f"incident {n}"
        raise LookupError(f"no {label} in the incident store")
    return int(found)


def _group_info(conn: Connection, gid: int) -> GroupInfo:
    groups = IncidentGroup.__table__
    g = conn.execute(select(groups).where(groups.c.id == gid)).one()
    return GroupInfo(
        group_id=g.id,
        fingerprint=g.fingerprint,
        grouped_by={
            "problem": g.problem_id,
            "signature": g.signature,
            "host": g.host,
            "model": g.model,
        },
        problem_id=g.problem_id or None,
        host=g.host or None,
        model=g.model or None,
        engine=g.engine,
        engine_version=g.engine_version,
        kb_version=g.kb_version,
        first_seen=g.first_seen,
        last_seen=g.last_seen,
        count=g.count,
        status=g.status,  # constrained to open/resolved by a CHECK in the schema
        resolution_fix=g.resolution_fix,
        resolved_by=g.resolved_by,
        resolved_at=g.resolved_at,
        resolution_note=g.resolution_note,
        resolution_link=g.resolution_link,
    )


def get_group(ref: int | str, *, settings: Settings | None = None) -> GroupInfo:
    """The group of incident `ref` (`12`) or group `ref` (`g3`), with why it was grouped.
    Raises LookupError if there is no such incident or group; within the database
    deadline."""

    def read(engine: Engine) -> GroupInfo:
        with connectivity(), engine.connect() as conn:
            return _group_info(conn, _group_id(conn, ref))

    return _bounded(settings, read)


def resolve(
    ref: int | str,
    *,
    fix: str,
    note: str | None = None,
    who: str | None = None,
    link: str | None = None,
    settings: Settings | None = None,
) -> GroupInfo:
    """`inferbot resolve ID --fix FIX [--note ...]`: mark the incident's group resolved with the
    fix that worked (`link`: where it was recorded, a Slack permalink). The next occurrence
    reopens it and reports "last fixed by" this fix. Within the database deadline: Slack's
    `resolve` and "This fixed it" wait on it."""
    if not fix.strip():
        raise ValueError("--fix must say what fixed it")

    def attempt(engine: Engine) -> GroupInfo:
        with write_engine(engine).begin() as conn:
            gid = _group_id(conn, ref)
            conn.execute(
                update(IncidentGroup)
                .where(IncidentGroup.id == gid)
                .values(
                    status="resolved",
                    resolution_fix=_cap(fix.strip(), 2000),
                    resolution_note=_cap(note, 4000) if note else None,
                    resolved_by=who,
                    resolved_at=_now(),
                    resolution_link=link,
                )
            )
            return _group_info(conn, gid)

    def write(engine: Engine) -> GroupInfo:
        with connectivity():
            return _retry_locked(lambda: attempt(engine))

    return _bounded(settings, write)


# Feedback kinds: "Not right?" notes, a pasted again in its thread, a fix that did not work.
WRONG, REPEAT, FIX_FAILED = "wrong_diagnosis", "repeat", "fix_failed"


def feedback(
    ref: int | str,
    *,
    note: str,
    who: str | None = None,
    kind: str = WRONG,
    settings: Settings | None = None,
) -> int:
    """Record a verdict on a diagnosis (default: "wrong diagnosis" with a note). `ref` is an
    incident (the event is linked) or a group. Returns the feedback id. Within the database
    deadline: a repeat in a thread is counted on the answer path."""
    ref_kind, n = parse_ref(ref)

    def write(engine: Engine) -> int:
        def attempt() -> int:
            with write_engine(engine).begin() as conn:
                gid = _group_id(conn, ref)
                return int(
                    conn.execute(
                        insert(Feedback)
                        .values(
                            created_at=_now(),
                            group_id=gid,
                            event_id=n if ref_kind == "event" else None,
                            kind=kind,
                            note=_cap(note, 4000),
                            who=who,
                        )
                        .returning(Feedback.id)
                    ).scalar_one()
                )

        with connectivity():
            return _retry_locked(attempt)

    return _bounded(settings, write)


# --------------------------------------------------------------------------- Slack's lookups


def claim_event_key(
    key: str, *, prune_before: datetime | None = None, settings: Settings | None = None
) -> bool:
    """INSERT `key` into slack_event_keys: True for the first inserter anywhere, False when
    the unique key says another process (or replica) already has it. Keys older than
    `prune_before` are deleted in the same transaction. Raises StoreUnavailable."""

    def claim(engine: Engine) -> bool:
        try:
            with connectivity(), write_engine(engine).begin() as conn:
                if prune_before is not None:
                    conn.execute(delete(SlackEventKey)
                                 .where(SlackEventKey.created_at < prune_before))
                conn.execute(insert(SlackEventKey).values(key=key, created_at=_now()))
        except IntegrityError:
            return False
        return True

    return _bounded(settings, claim)


# How far back "the incident of this thread" is looked for.
THREAD_DAYS = 30


def thread_incident(channel: str, thread: str, *, settings: Settings | None = None) -> int | None:
    """The newest incident diagnosed in this Slack thread within THREAD_DAYS, or None (asked
    before a paste in a thread is answered: within the database deadline)."""

    def find(engine: Engine) -> Any:
        with connectivity(), engine.connect() as conn:
            return conn.execute(thread_incident_query(channel, thread)).scalar()

    found = _bounded(settings, find)
    return int(found) if found is not None else None


def thread_incident_query(channel: str, thread: str) -> Select[Any]:
    """The query: ix_incident_events_channel_thread finds the thread's few rows."""
    E = IncidentEvent
    since = _now() - timedelta(days=THREAD_DAYS)
    return (
        select(E.id)
        .where(E.channel == channel, E.thread == thread, E.created_at >= since)
        .order_by(E.id.desc())
        .limit(1)
    )


@struct(frozen=True, slots=True)
class IncidentOrigin:
    """Where an incident was diagnosed, and the command of one of its fixes (None: no such
    fix). A click names an incident and a fix; the text recorded, and the channel the click
    must come from, are the store's, not the click's."""

    channel: str | None
    fix_command: str | None
    permalink: str | None = None  # the answer's Slack message


def incident_origin(
    incident_id: int, fix_id: str | None = None, *, settings: Settings | None = None
) -> IncidentOrigin | None:
    """The origin of incident `incident_id` (None: no such incident); within the database
    deadline."""

    def find(engine: Engine) -> Row[Any] | None:
        with connectivity(), engine.connect() as conn:
            E = IncidentEvent
            return conn.execute(select(E.channel, E.fixes, E.permalink)
                                .where(E.id == incident_id)).first()

    row = _bounded(settings, find)
    if row is None:
        return None
    command = None
    for fix in row.fixes or []:
        if isinstance(fix, dict) and fix_id is not None and fix.get("id") == fix_id:
            command = _fix_text(fix) or fix_id
    return IncidentOrigin(row.channel, command, row.permalink)


def _fix_text(fix: dict[str, Any]) -> str:
    """What a fix is remembered by: the flags it sets (`--max-model-len 32768`), which read
    the same whatever else the server's command line held, else its command."""
    flags = fix.get("flags")
    if isinstance(flags, dict) and flags:
        return " ".join(str(k) if v is True or v is None else f"{k} {v}"
                        for k, v in flags.items())
    return str(fix.get("command") or fix.get("title") or "")


@struct(frozen=True)
class IncidentView:
    """A stored incident as its message shows it again: the diagnosis as it was stored, when,
    where, and its group now (how often seen, whether and how it was fixed since), with the
    number of "not right" notes left on the group."""

    channel: str | None
    thread: str | None
    created_at: datetime
    diagnosis: dict[str, Any]
    group: GroupInfo
    corrections: int  # "not right" notes on the group
    permalink: str | None
    repeats: int = 0  # times this incident's failure was pasted again in its thread


def incident_view(incident_id: int, *, settings: Settings | None = None) -> IncidentView | None:
    """Incident `incident_id` with its group (None: no such incident); within the database
    deadline (a paste in a thread asks for it before it is answered)."""

    def read(engine: Engine) -> IncidentView | None:
        with connectivity(), engine.connect() as conn:
            E = IncidentEvent
            row = conn.execute(select(E.channel, E.thread, E.created_at, E.diagnosis,
                                      E.group_id, E.permalink)
                               .where(E.id == incident_id)).first()
            if row is None:
                return None
            notes = conn.execute(select(func.count()).select_from(Feedback).where(
                Feedback.group_id == row.group_id, Feedback.kind == WRONG)).scalar_one()
            repeats = conn.execute(select(func.count()).select_from(Feedback).where(
                Feedback.event_id == incident_id, Feedback.kind == REPEAT)).scalar_one()
            return IncidentView(row.channel, row.thread, row.created_at, row.diagnosis or {},
                                _group_info(conn, row.group_id), int(notes), row.permalink,
                                int(repeats))

    return _bounded(settings, read)


def set_permalink(incident_id: int, permalink: str, *, settings: Settings | None = None) -> None:
    """Remember where incident `incident_id`'s answer can be read again; within the database
    deadline."""

    def write(engine: Engine) -> None:
        def attempt() -> None:
            with write_engine(engine).begin() as conn:
                conn.execute(update(IncidentEvent).where(IncidentEvent.id == incident_id)
                             .values(permalink=_cap(permalink, 2000)))

        with connectivity():
            _retry_locked(attempt)

    _bounded(settings, write)
