"""History text search that stays fast at millions of incidents, filters included.

A text index alone answers "the newest 50 events with these words" quickly, but a search with a
host, problem, model, version or time filter used to walk the index's matches newest first and
check each one against the filter: for a host with a fraction of a percent of the events, that
is tens of thousands of rows per answer. So the filters live inside the text index too, as
*facet tokens* (migration 0003), and the index intersects them with the words itself:

- `hostx<v>`, `problemx<v>`, `modelx<v>`, `versionx<v>`: the event's value, encoded as one
  token (SQLite: hex of the UTF-8 bytes; PostgreSQL: md5, the encoding it can compute in a
  generated column). An exact value, so the filter's own equality holds for every hit.
  `mvx<v>` is the model and the engine version together (`MODEL\nVERSION`): each alone is a
  big share of a fleet's events, the pair a small one, and an index intersects one small list
  faster than two big ones.
- `dayx<YYYYMMDD>`, `monthx<YYYYMM>`, `yearx<YYYY>`: the UTC day, month and year of
  `created_at`. A time window becomes the fewest buckets that cover it (whole years, whole
  months, the days at the edges), OR'd. The buckets cover the window, so nothing in it is
  missed; the exact `created_at` comparison still runs on every hit and drops the rest.

SQLite keeps the facets in their own FTS5 column (`facets`), so a word of a paste can never
match one; PostgreSQL gives them weight A and asks for `:A`. The filters' ordinary WHERE
clauses stay in every query: the facets make it fast, the clauses keep it exact.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from dataclasses import field
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, TextClause, func, select, text
from sqlalchemy.engine import Connection

from bot.store.tables import FTS_TABLE, Base, IncidentEvent, IncidentGroup
from bot.structs import struct

# PostgreSQL search (pg_search_ids): the newest rows walked first, to see how common the
# matches are; and what one candidate of the GIN bitmap costs (a heap visit out of order) in
# rows walked in order, as measured at a million events (bench/bench_store.py).
PG_WALK_ROWS = 1_000
PG_BITMAP_ROW_COST = 4
PG_COMMON = 0.25
_FACET_PREFIX = {"host": "hostx", "problem": "problemx", "model": "modelx",
                 "engine_version": "versionx", "model_version": "mvx"}


def search_terms(search: str) -> list[list[str]]:
    """User text -> words -> tokens, tokenized as both text indexes tokenize (runs of letters
    and digits). Every word must appear; a word of several tokens (`max-model-len`, `7.5`)
    must appear as that phrase. Nothing the user types is ever query syntax."""
    words = (re.findall(r"[^\W_]+", w.lower()) for w in search.split())
    return [w for w in words if w]


def facet_token(kind: str, value: str, dialect: str) -> str:
    """The index token for `kind` (host, problem, model, engine_version) equal to `value`."""
    data = value.encode()
    digest = data.hex() if dialect == "sqlite" else hashlib.md5(data).hexdigest()
    return _FACET_PREFIX[kind] + digest


def time_buckets(since: datetime, until: datetime) -> list[str]:
    """The fewest day, month and year tokens whose union covers [since, until] (UTC)."""
    first = since.astimezone(UTC).date()
    last = until.astimezone(UTC).date()
    return list(_cover(first, last))


def _cover(first: date, last: date) -> Iterator[str]:
    day = first
    while day <= last:
        if day.month == 1 and day.day == 1 and date(day.year, 12, 31) <= last:
            yield f"yearx{day.year:04d}"
            day = date(day.year + 1, 1, 1)
        elif day.day == 1 and _month_end(day) <= last:
            yield f"monthx{day.year:04d}{day.month:02d}"
            day = _month_end(day) + timedelta(days=1)
        else:
            yield f"dayx{day:%Y%m%d}"
            day += timedelta(days=1)


def _month_end(day: date) -> date:
    following = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return following - timedelta(days=1)


@struct
class Search:
    """One history search: the words, and the filters the index can apply as facets."""

    terms: list[list[str]]
    facets: dict[str, str] = field(default_factory=dict)  # kind -> value, as the filter has it
    since: datetime | None = None
    until: datetime | None = None

    def filter(self, kind: str, value: str) -> None:
        """Add an equality filter as its facet (a model and a version make one pair)."""
        self.facets[kind] = value
        if "model" in self.facets and "engine_version" in self.facets:
            pair = f"{self.facets.pop('model')}\n{self.facets.pop('engine_version')}"
            self.facets["model_version"] = pair

    def fts5_query(self, conn: Connection) -> str:
        """An FTS5 MATCH expression: the words in the text columns, facets in theirs."""
        words = " ".join('"' + " ".join(tokens) + '"' for tokens in self.terms)
        parts = [f"{{excerpt labels}} : ({words})"]
        parts += [f"facets : {facet_token(k, v, 'sqlite')}" for k, v in self.facets.items()]
        buckets = self._buckets(conn)
        if buckets:
            parts.append(f"facets : ({' OR '.join(buckets)})")
        return " AND ".join(parts)

    def pg_tsqueries(self, conn: Connection) -> tuple[str, str]:
        """Two to_tsquery('simple', ...) expressions: the whole search (phrases, then facets
        of weight A), and the part worth asking the GIN index. GIN reads the whole posting
        list of every lexeme it is given, so a lexeme in more than PG_COMMON of the events
        (a word on every log line, a facet of a big share) costs more than it narrows: it is
        left to the recheck against the whole search."""
        share = _lexeme_shares(conn)
        whole, index = [], []
        for tokens in self.terms:
            whole.append("(" + " <-> ".join(f"'{t}'" for t in tokens) + ")")
            index += [(share.get(t, 0.0), f"'{t}'") for t in tokens]
        for kind, value in self.facets.items():
            token = facet_token(kind, value, "postgresql")
            whole.append(f"'{token}':A")
            index.append((share.get(token, 0.0), f"'{token}'"))
        buckets = self._buckets(conn)
        if buckets:
            whole.append("(" + " | ".join(f"'{b}':A" for b in buckets) + ")")
            index.append((min(1.0, sum(share.get(b, 0.0) for b in buckets)),
                          "(" + " | ".join(f"'{b}'" for b in buckets) + ")"))
        narrow = [entry for fraction, entry in index if fraction < PG_COMMON]
        return " & ".join(whole), " & ".join(narrow or [min(index)[1]])

    def _buckets(self, conn: Connection) -> list[str]:
        """The window's time buckets; an open end is closed at the oldest or newest event
        (an index lookup each), so the buckets still cover every row the window admits."""
        if self.since is None and self.until is None:
            return []
        created = IncidentEvent.created_at
        lo = self.since or conn.execute(select(func.min(created))).scalar()
        hi = self.until or conn.execute(select(func.max(created))).scalar()
        if lo is None or hi is None or hi < lo:
            return []
        return time_buckets(lo, hi)


def pg_search_ids(conn: Connection, where: list[ColumnElement[bool]], search: Search,
                  limit: int, join: bool) -> list[int]:
    """Ids of matching events, newest first, in bounded time on millions of rows.

    A GIN index cannot return rows in order, so "the newest 50 matches" is either a walk down
    the primary key checking each row (cost: the rows walked, so fast when matches are common)
    or a GIN bitmap of every match, then a sort (cost: a heap visit per candidate, so fast when
    matches are rare). The planner's estimates for correlated log words and facets are often
    far off, so the choice is made from what a first walk over the newest PG_WALK_ROWS rows
    observed: at that density, walking on to the rest of `limit` costs fewer rows than the
    older matches' bitmap would (PG_BITMAP_ROW_COST each), or it does not.
    """
    E = IncidentEvent
    whole, narrow = search.pg_tsqueries(conn)
    match = text("incident_events.search_tsv @@ to_tsquery('simple', :tsq)").bindparams(
        tsq=whole)
    base = select(E.id)
    if join:
        base = base.join(IncidentGroup, IncidentGroup.id == E.group_id)
    base = base.where(*where)
    newest = conn.execute(select(func.max(E.id))).scalar()
    if newest is None:
        return []

    def walk(lo: int, hi: int, k: int) -> list[int]:
        rows = base.where(match, E.id > lo, E.id <= hi).order_by(E.id.desc()).limit(k)
        return list(conn.execute(rows).scalars())

    _plan(conn, bitmapscan="off")
    ids = walk(newest - PG_WALK_ROWS, newest, limit)
    hi = newest - PG_WALK_ROWS
    need = limit - len(ids)
    if ids and need:
        density = len(ids) / PG_WALK_ROWS
        more = int(1.5 * need / density)  # rows to walk for the rest, with a margin
        if more < PG_BITMAP_ROW_COST * density * hi:  # cheaper than the older bitmap
            ids += walk(hi - more, hi, need)
            hi -= more
    if len(ids) < limit and hi > 0:
        _plan(conn, bitmapscan="on", indexscan="off", seqscan="off")
        # the index is asked the narrow part; ts_match_vq (the operator's function, which no
        # index serves) checks the whole search on each candidate
        indexed = text("incident_events.search_tsv @@ to_tsquery('simple', :narrow) AND "
                       "ts_match_vq(incident_events.search_tsv, to_tsquery('simple', :tsq))"
                       ).bindparams(narrow=narrow, tsq=whole)
        older = base.where(indexed, E.id <= hi).order_by(E.id.desc()).limit(limit - len(ids))
        ids += conn.execute(older).scalars()
        _plan(conn, indexscan="on", seqscan="on")
    else:
        _plan(conn, bitmapscan="on")
    return ids


# (when read, the database URL) -> lexeme -> share of the events that have it, from the
# planner's statistics (ANALYZE; autovacuum keeps them fresh)
_SHARES: dict[str, tuple[float, dict[str, float]]] = {}
_SHARES_TTL_S = 600.0


def _lexeme_shares(conn: Connection) -> dict[str, float]:
    """The most common lexemes of search_tsv and their shares (pg_stats); a lexeme not listed
    is rarer than every listed one."""
    key = conn.engine.url.render_as_string(hide_password=True)
    cached = _SHARES.get(key)
    if cached is not None and time.monotonic() - cached[0] < _SHARES_TTL_S:
        return cached[1]
    row = conn.execute(text(
        "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
        "WHERE schemaname = current_schema() AND tablename = 'incident_events' "
        "AND attname = 'search_tsv'")).first()
    shares = dict(zip(row[0], row[1], strict=False)) if row and row[0] else {}
    _SHARES[key] = (time.monotonic(), shares)
    return shares


def _plan(conn: Connection, **scans: str) -> None:
    """Allow or forbid scan kinds for the rest of this transaction, in one round trip."""
    calls = ", ".join(f"set_config('enable_{kind}', '{on}', true)" for kind, on in scans.items())
    conn.execute(text(f"SELECT {calls}"))


def compact(conn: Connection) -> None:
    """Keep the text index quick to query as it grows: SQLite's FTS5 index is a stack of
    segments (every write adds one, merged only now and then), and a search walks each; an
    optimize merges them into one (about 30 s per million events). Both engines refresh the
    planner's statistics, which PostgreSQL's search reads (see `_lexeme_shares`).

    On SQLite only the store's own tables are analyzed, never FTS5's shadow tables: a row
    count for `..._fts_data` taken while it was small (a fresh store's `inferbot db upgrade`)
    steers FTS5's own lookups into scans, and every insert then costs time in proportion to
    the index (writes fell from thousands per second to tens). Statistics an older version
    left on them are dropped, and the planner reloads what remains."""
    if conn.dialect.name == "sqlite":
        conn.execute(text(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')"))
        for table in Base.metadata.tables:
            conn.execute(text(f'ANALYZE "{table}"'))
        conn.execute(text(f"DELETE FROM sqlite_stat1 WHERE tbl LIKE '{FTS_TABLE}%'"))
        conn.execute(text("ANALYZE sqlite_schema"))
    else:
        conn.execute(text("ANALYZE incident_events"))
        _SHARES.clear()


def fts5_match(search: Search, conn: Connection) -> TextClause:
    """The SQLite MATCH clause for `search` (FTS5 walks it newest rowid first)."""
    return text(f"{FTS_TABLE} MATCH :fts_q").bindparams(fts_q=search.fts5_query(conn))
