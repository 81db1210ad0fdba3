"""search facets: history filters inside the text index, so text search + filter stays fast

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

`bot.store.search` explains the facet tokens. The text itself is tokenized exactly as in 0001.
This upgrades a store in place: SQLite's FTS5 table is rebuilt from the events (its content is
now the view `incident_events_search`, which adds the `facets` column); PostgreSQL's generated
`search_tsv` column is recomputed with the facets (a rewrite of incident_events, under the
migration's lock) and its GIN index built again. Expect about a minute per million events.
The token formats here and in bot.store.search must agree: the store tests search by every
facet on both engines.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite: created_at is stored as naive UTC text, which strftime reads as UTC.
_SQLITE_FACETS = (
    "'hostx' || hex(host) || ' problemx' || hex(problem_id)"
    " || ' modelx' || hex(coalesce(model, '')) || ' versionx' || hex(coalesce(engine_version, ''))"
    " || ' mvx' || hex(coalesce(model, '') || char(10) || coalesce(engine_version, ''))"
    " || ' dayx' || strftime('%Y%m%d', created_at) || ' monthx' || strftime('%Y%m', created_at)"
    " || ' yearx' || strftime('%Y', created_at)"
)
_PG_TEXT = (
    "to_tsvector('simple'::regconfig, "
    "regexp_replace(excerpt || ' ' || labels, '[^[:alnum:]]+', ' ', 'g'))"
)


def _pg_facets() -> str:
    """The facets as lexemes of weight A. md5 and date_part on a UTC timestamp are immutable,
    as a generated column needs (convert_to and to_char are not)."""
    utc = "(created_at AT TIME ZONE 'UTC')"
    year, month, day = (f"lpad(date_part('{part}', {utc})::int::text, {width}, '0')"
                        for part, width in (("year", 4), ("month", 2), ("day", 2)))
    lexemes = [
        "'hostx' || md5(host)",
        "'problemx' || md5(problem_id)",
        "'modelx' || md5(coalesce(model, ''))",
        "'versionx' || md5(coalesce(engine_version, ''))",
        "'mvx' || md5(coalesce(model, '') || E'\\n' || coalesce(engine_version, ''))",
        f"'dayx' || {year} || {month} || {day}",
        f"'monthx' || {year} || {month}",
        f"'yearx' || {year}",
    ]
    return f"setweight(array_to_tsvector(ARRAY[{', '.join(lexemes)}]), 'A')"


def _sqlite_search(facets: bool) -> None:
    """The FTS5 table over incident_events (with the facets column and its view, or as in 0001)
    and the triggers that keep it in step, then filled from the events."""
    columns = "excerpt, labels, facets" if facets else "excerpt, labels"
    if facets:
        op.execute(
            "CREATE VIEW incident_events_search AS SELECT id, excerpt, labels, "
            f"{_SQLITE_FACETS} AS facets FROM incident_events"
        )
    content = "incident_events_search" if facets else "incident_events"
    op.execute(
        f"CREATE VIRTUAL TABLE incident_events_fts USING fts5({columns}, "
        f"content='{content}', content_rowid='id')"
    )
    new = f"SELECT id, {columns} FROM {content} WHERE id = new.id"
    old = f"SELECT 'delete', id, {columns} FROM {content} WHERE id = old.id"
    into = f"INSERT INTO incident_events_fts(rowid, {columns}) "
    delete = f"INSERT INTO incident_events_fts(incident_events_fts, rowid, {columns}) "
    # The row as the content (view) shows it: before a delete or an update, the old one is
    # removed from the index; after an insert or an update, the new one is added.
    watched = "excerpt, labels, host, problem_id, model, engine_version, created_at" if facets \
        else "excerpt, labels"
    op.execute(f"CREATE TRIGGER incident_events_fts_ai AFTER INSERT ON incident_events BEGIN "
               f"{into}{new}; END")
    op.execute(f"CREATE TRIGGER incident_events_fts_bd BEFORE DELETE ON incident_events BEGIN "
               f"{delete}{old}; END")
    op.execute(f"CREATE TRIGGER incident_events_fts_bu BEFORE UPDATE OF {watched} "
               f"ON incident_events BEGIN {delete}{old}; END")
    op.execute(f"CREATE TRIGGER incident_events_fts_au AFTER UPDATE OF {watched} "
               f"ON incident_events BEGIN {into}{new}; END")
    op.execute("INSERT INTO incident_events_fts(incident_events_fts) VALUES ('rebuild')")


def _sqlite_drop_search() -> None:
    for trigger in ("ai", "ad", "bd", "bu", "au"):
        op.execute(f"DROP TRIGGER IF EXISTS incident_events_fts_{trigger}")
    op.execute("DROP TABLE IF EXISTS incident_events_fts")
    op.execute("DROP VIEW IF EXISTS incident_events_search")


def _pg_search(expression: str) -> None:
    op.execute("ALTER TABLE incident_events DROP COLUMN IF EXISTS search_tsv")
    op.execute(
        f"ALTER TABLE incident_events ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS "
        f"({expression}) STORED"
    )
    op.execute(
        "CREATE INDEX ix_incident_events_search_tsv ON incident_events USING gin (search_tsv)"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_drop_search()
        _sqlite_search(facets=True)
    elif dialect == "postgresql":
        _pg_search(f"{_PG_TEXT} || {_pg_facets()}")
        op.execute("ANALYZE incident_events")  # statistics for the new column's lexemes


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        _sqlite_drop_search()
        _sqlite_search(facets=False)
    elif dialect == "postgresql":
        _pg_search(_PG_TEXT)
