"""Text search combined with every history filter, through the facets in the text index: the
same answers as the filter alone then the words, on both engines and both PostgreSQL passes;
and a store migrated in place finds what it held before."""

from __future__ import annotations

import random
import sqlite3
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, text, update

from bot.config import Settings
from bot.store import history, record, upgrade
from bot.store import search as store_search
from bot.store.db import dispose_engines, get_engine, migrate
from bot.store.repository import _write_event, build_entry
from bot.store.search import search_terms, time_buckets
from bot.store.tables import IncidentEvent
from tests.store.conftest import make_diagnosis

HOSTS = ["gpu-1", "gpu-2", "GPU-Ü3"]
MODELS = ["org/llama", "org/Llama", "org/qwen-ü"]
LINES = [
    "ValueError: No available memory for the cache blocks. Try increasing gpu_memory_utilization",
    "NCCL error: unhandled system error, NCCL version 2.21.5",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
]
START = datetime(2025, 12, 30, 22, 0, tzinfo=UTC)


def _bucket_days(token: str) -> tuple[date, date]:
    """The first and last day a bucket token stands for."""
    kind, digits = token.split("x")
    if kind == "year":
        return date(int(digits), 1, 1), date(int(digits), 12, 31)
    if kind == "month":
        first = date(int(digits[:4]), int(digits[4:]), 1)
        return first, (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    day = date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    return day, day


def test_time_buckets_cover_every_day_of_the_window_and_nothing_far_outside() -> None:
    rng = random.Random(7)
    for _ in range(500):
        since = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randrange(3 * 365 * 24))
        until = since + timedelta(hours=rng.randrange(1, 900 * 24))
        spans = [_bucket_days(t) for t in time_buckets(since, until)]
        covered = {lo + timedelta(days=i) for lo, hi in spans for i in range((hi - lo).days + 1)}
        wanted = {since.date() + timedelta(days=i) for i in range((until.date() - since.date()).days
                                                                  + 1)}
        assert covered == wanted
        assert len(spans) <= 31 * 2 + 11 * 2 + (until.year - since.year + 1)
    assert time_buckets(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 12, 31, tzinfo=UTC)) \
        == ["yearx2025"]
    assert time_buckets(datetime(2025, 12, 31, 12, tzinfo=UTC),
                        datetime(2026, 2, 1, 6, tzinfo=UTC)) == [
        "dayx20251231", "monthx202601", "dayx20260201"]


def _seed(settings: Settings, n: int = 60) -> None:
    rng = random.Random(3)
    for i in range(n):
        line = LINES[i % 3]
        d = make_diagnosis(f"{line} (event {i})", host=rng.choice(HOSTS),
                           problem=f"problem-{i % 4}", model=rng.choice(MODELS),
                           engine_version=rng.choice(["0.8.3", "0.9.1"]))
        # every 5 hours across a year's end and two months' ends; one event recorded late
        # (spooled), so its id is not in time order
        when = START + timedelta(hours=5 * i) if i != n - 1 else START + timedelta(hours=7)
        record(d, source="cli", settings=settings, created_at=when)


def _with_words(rows: list[Any], words: str) -> list[int]:
    """The rows whose excerpt has every word (as its phrase of tokens), by brute force."""
    phrases = [" " + " ".join(tokens) + " " for tokens in search_terms(words)]
    found = []
    for r in rows:
        tokens = " " + " ".join(t for word in search_terms(r.excerpt) for t in word) + " "
        if all(p in tokens for p in phrases):
            found.append(r.incident_id)
    return found


FILTERS: list[dict[str, Any]] = [
    {"host": "gpu-1"},
    {"host": "gpu-ü3"},
    {"problem": "problem-1"},
    {"model": "org/Llama"},
    {"model": "org/qwen-ü"},
    {"engine_version": "0.9.1"},
    {"model": "org/qwen-ü", "engine_version": "0.8.3"},
    {"model": "org/llama", "engine_version": "0.9.1", "host": "gpu-1"},
    {"since": datetime(2025, 12, 31, 12, tzinfo=UTC), "until": datetime(2026, 1, 2, tzinfo=UTC)},
    {"since": datetime(2026, 1, 5, tzinfo=UTC)},
    {"until": datetime(2025, 12, 31, 3, tzinfo=UTC)},
    {"host": "gpu-2", "since": datetime(2025, 12, 30, 23, tzinfo=UTC),
     "until": datetime(2026, 1, 6, tzinfo=UTC), "engine_version": "0.8.3"},
]


@pytest.mark.parametrize("recent_rows", [store_search.PG_WALK_ROWS, 1])
def test_search_with_any_filter_finds_what_the_filter_then_the_words_find(
        settings: Settings, recent_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """recent_rows=1 sends PostgreSQL to its second pass (the GIN bitmap) at once."""
    monkeypatch.setattr(store_search, "PG_WALK_ROWS", recent_rows)
    _seed(settings)
    for filters in FILTERS:
        plain = history(limit=1000, settings=settings, **filters)
        assert plain, filters  # every filter selects something, and not everything
        assert len(plain) < 60, filters
        for words in ("cache blocks", "NCCL", "out of memory 2.00", "event"):
            by_id = sorted(_with_words(plain, words), reverse=True)
            found = [r.incident_id for r in
                     history(search=words, limit=1000, settings=settings, **filters)]
            assert found == by_id, (filters, words)


def test_a_word_that_spells_a_facet_matches_no_filter(settings: Settings) -> None:
    """A paste that contains a facet token's text is found by that text, and a filter on the
    host whose token it spells does not see it."""
    token = store_search.facet_token("host", "gpu-9", "sqlite")
    d = make_diagnosis(f"ValueError: {token} and hostx{'0' * 32}", host="gpu-1")
    record(d, source="cli", settings=settings)
    assert len(history(search=token, settings=settings)) == 1
    assert history(search="ValueError", host="gpu-9", settings=settings) == []


def test_a_store_at_the_previous_revision_is_searchable_by_filter_after_upgrade(
        db_url: str, tmp_path: Path) -> None:
    engine = get_engine(db_url)
    migrate(engine, "0002")
    for i, host in enumerate(["gpu-1", "gpu-2", "gpu-1"]):
        d = make_diagnosis(f"{LINES[0]} (old {i})", host=host)
        _write_event(engine, build_entry(d, source="cli", user=None, channel=None,
                                         thread=None, excerpt=d.excerpt,
                                         created_at=START + timedelta(days=i)))
    dispose_engines()
    settings = Settings(database_url=db_url, spool_dir=tmp_path / "spool")
    upgrade(settings)
    rows = history(search="cache blocks", host="gpu-1", settings=settings)
    assert [r.excerpt.rsplit(" ", 1)[-1] for r in rows] == ["2)", "0)"]
    window = history(search="cache", since=START + timedelta(days=1), settings=settings)
    assert [r.host for r in window] == ["gpu-1", "gpu-2"]


def test_sqlite_index_stays_in_step_with_updates_and_deletes(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.db'}",
                        spool_dir=tmp_path / "spool")
    _seed(settings, n=9)
    engine = get_engine(settings.database_url)
    E = IncidentEvent
    with engine.begin() as conn:
        conn.execute(update(E).where(E.id == 2).values(host="gpu-moved", excerpt="moved text"))
        conn.execute(delete(E).where(E.id == 3))
        conn.execute(text("INSERT INTO incident_events_fts(incident_events_fts) "
                          "VALUES ('integrity-check')"))
    assert [r.incident_id for r in history(search="moved", host="gpu-moved",
                                           settings=settings)] == [2]
    assert 3 not in [r.incident_id for r in history(search="event", settings=settings)]


def test_db_upgrade_compacts_the_text_index(settings: Settings) -> None:
    """Each write adds an FTS5 segment; `inferbot db upgrade` merges them (SQLite) and
    refreshes the statistics the search reads (both): the same answers from fewer pages."""
    _seed(settings, n=30)
    before = [r.incident_id for r in history(search="event", host="gpu-1", settings=settings)]
    engine = get_engine(settings.database_url)
    sqlite = engine.dialect.name == "sqlite"
    probe = text("SELECT count(*) FROM incident_events_fts_data" if sqlite else
                 "SELECT pg_stat_get_analyze_count('incident_events'::regclass)")
    with engine.connect() as conn:
        before_count = conn.execute(probe).scalar_one()
    upgrade(settings)
    deadline = time.monotonic() + 5  # statistics may reach other sessions a moment later
    while True:
        with engine.connect() as conn:
            after_count = conn.execute(probe).scalar_one()
        # fewer index pages (SQLite), one more ANALYZE (PostgreSQL)
        done = after_count < before_count if sqlite else after_count > before_count
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert done, (before_count, after_count)
    assert [r.incident_id for r in history(search="event", host="gpu-1",
                                           settings=settings)] == before


def test_writes_stay_as_cheap_as_the_store_grows_after_db_upgrade_on_a_fresh_store(
        tmp_path: Path) -> None:
    """`inferbot db upgrade` right after install analyzes a store with nothing in it. The
    statistics it leaves must not make every later write walk the whole text index: a
    transaction of 2,000 inserts costs about the same number of SQLite VM steps (FTS5's own
    statements included) on a store of one event as on one of 12,000."""
    db = tmp_path / "s.db"
    settings = Settings(database_url=f"sqlite:///{db}", spool_dir=tmp_path / "spool")
    upgrade(settings)
    _seed(settings, n=1)
    dispose_engines()
    columns = ", ".join(c.name for c in IncidentEvent.__table__.columns
                        if c.name not in ("id", "event_uid", "excerpt", "host", "created_at"))
    # each copy with words of its own (pids, sizes), on its own host and day, as real events
    # are: the index grows
    copy = (f"INSERT INTO incident_events (event_uid, excerpt, host, created_at, {columns}) "
            "SELECT lower(hex(randomblob(16))), excerpt || ' pid ' || abs(random() % 100000) "
            "|| ' size ' || abs(random() % 1000), 'gpu-' || abs(random() % 500), "
            "datetime(created_at, '-' || abs(random() % 365) || ' days'), "
            f"{columns} FROM incident_events ORDER BY id LIMIT ?")
    conn = sqlite3.connect(db, isolation_level=None)
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    def steps_for_2000_inserts() -> int:
        steps[0] = 0
        conn.set_progress_handler(count, 100)
        conn.execute("BEGIN")
        for _ in range(2000):
            conn.execute(copy, (1,))
        conn.execute("COMMIT")
        conn.set_progress_handler(None, 0)
        return steps[0]

    try:
        small = steps_for_2000_inserts()
        while conn.execute("SELECT count(*) FROM incident_events").fetchone()[0] < 12_000:
            conn.execute(copy, (2000,))
        large = steps_for_2000_inserts()
    finally:
        conn.close()
    assert large < 3 * small, (small, large)
