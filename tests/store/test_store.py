"""Recording, grouping, history, resolution and feedback, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from bot.config import Settings
from bot.schema import to_data
from bot.store import (
    feedback,
    format_history_json,
    format_history_text,
    get_group,
    history,
    record,
    record_command,
    resolve,
)
from bot.store import search as store_search
from bot.store.db import get_engine
from bot.store.repository import _write_event, build_entry
from bot.store.tables import EXCERPT_MAX_CHARS, CommandAudit, Feedback, IncidentEvent
from bot.store.views import HistoryRow

from .conftest import at, make_diagnosis

PASTE_1 = (
    "INFO 11-30 06:03:16 [core.py:88] (VllmWorker pid=4242) ValueError: "
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)
PASTE_2 = (
    "INFO 11-30 09:41:02 [core.py:88] (VllmWorker pid=917) ValueError: "
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)


def _count(settings: Settings, model: type[object]) -> int:
    with get_engine(settings.database_url).connect() as conn:
        return int(conn.execute(select(func.count()).select_from(model)).scalar_one())


def test_same_paste_twice_is_one_group_two_events(settings: Settings) -> None:
    first = record(make_diagnosis(PASTE_1), source="cli", settings=settings)
    second = record(make_diagnosis(PASTE_2), source="slack", settings=settings)
    assert not first.spooled and not second.spooled
    assert first.group_id == second.group_id
    assert first.incident_id != second.incident_id
    assert (first.count, second.count) == (1, 2)
    assert second.first_seen == first.first_seen
    assert second.last_fix is None and second.status == "open"
    assert _count(settings, IncidentEvent) == 2


def test_a_different_host_is_another_group(settings: Settings) -> None:
    a = record(make_diagnosis(PASTE_1, host="gpu-1"), source="cli", settings=settings)
    b = record(make_diagnosis(PASTE_2, host="gpu-2"), source="cli", settings=settings)
    assert a.group_id != b.group_id
    assert (a.count, b.count) == (1, 1)


def test_group_explains_its_grouping(settings: Settings) -> None:
    r = record(make_diagnosis(PASTE_1, host="GPU-1"), source="cli", settings=settings)
    g = get_group(f"g{r.group_id}", settings=settings)
    assert g == get_group(r.incident_id or 0, settings=settings)
    assert g.grouped_by["problem"] == "kv-cache-no-blocks"
    assert g.grouped_by["host"] == "gpu-1"
    assert g.grouped_by["model"] == "meta-llama/llama-3.1-8b-instruct"
    assert "pid=<pid>" in g.grouped_by["signature"] and "<ts>" in g.grouped_by["signature"]
    assert g.fingerprint == r.fingerprint
    assert "same host (gpu-1)" in g.explain()


def test_event_keeps_the_whole_diagnosis(settings: Settings) -> None:
    d = make_diagnosis(PASTE_1)
    r = record(
        d,
        source="slack",
        user="U123",
        channel="C42",
        thread="1701.2",
        excerpt=PASTE_1,
        settings=settings,
    )
    with get_engine(settings.database_url).connect() as conn:
        ev = conn.execute(
            select(IncidentEvent.__table__).where(IncidentEvent.id == r.incident_id)
        ).one()
    assert (ev.source, ev.user_name, ev.channel, ev.thread) == ("slack", "U123", "C42", "1701.2")
    assert (ev.engine, ev.engine_version, ev.kb_version) == ("vllm", "0.8.3", "2026.11.1")
    assert ev.problems[0]["id"] == "kv-cache-no-blocks"
    assert ev.problems[0]["confidence"] == 0.9
    assert ev.causes[0]["id"] == "max-model-len-too-large"
    assert ev.facts["max_model_len"] == 131072
    assert ev.fixes[0]["flags"] == {"--max-model-len": 77824}
    assert ev.diagnosis == to_data(d)


def test_excerpt_is_capped(settings: Settings) -> None:
    r = record(
        make_diagnosis(), source="cli", excerpt="x" * 100_000, settings=settings
    )
    rows = history(settings=settings)
    assert rows[0].incident_id == r.incident_id
    assert len(rows[0].excerpt) == EXCERPT_MAX_CHARS


def test_writing_the_same_entry_twice_is_idempotent(settings: Settings) -> None:
    record(make_diagnosis(), source="cli", settings=settings)  # creates the schema
    entry = build_entry(
        make_diagnosis(PASTE_2),
        source="cli",
        user=None,
        channel=None,
        thread=None,
        excerpt="",
    )
    engine = get_engine(settings.database_url)
    one = _write_event(engine, entry)
    two = _write_event(engine, entry)
    assert two.already_recorded and two.incident_id == one.incident_id
    assert two.count == 2  # the group was counted once for this event
    assert _count(settings, IncidentEvent) == 2


def _seed(settings: Settings) -> dict[str, int]:
    ids: dict[str, int] = {}
    rows = [
        ("a", PASTE_1, "gpu-1", "kv-cache-no-blocks", "org/llama", "0.8.3", at(1, day=1)),
        ("b", PASTE_2, "gpu-1", "kv-cache-no-blocks", "org/llama", "0.8.3", at(1, day=28)),
        (
            "c",
            "NCCL error: unhandled system error, NCCL version 2.21.5",
            "gpu-2",
            "nccl-failure",
            "org/qwen",
            "0.9.1",
            at(5),
        ),
        (
            "d",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "gpu-3",
            "oom-under-load",
            "org/llama",
            "0.9.1",
            at(6),
        ),
    ]
    for key, line, host, problem, model, version, when in rows:
        d = make_diagnosis(line, host=host, problem=problem, model=model, engine_version=version)
        r = record(d, source="cli", settings=settings, created_at=when)
        assert r.incident_id is not None
        ids[key] = r.incident_id
    return ids


def _ids(rows: Sequence[HistoryRow]) -> list[int]:
    return [r.incident_id for r in rows]


def test_history_filters(settings: Settings) -> None:
    ids = _seed(settings)
    assert _ids(history(settings=settings)) == [ids["d"], ids["c"], ids["b"], ids["a"]]
    assert _ids(history(host="GPU-1", settings=settings)) == [ids["b"], ids["a"]]
    assert _ids(history(problem="nccl-failure", settings=settings)) == [ids["c"]]
    assert _ids(history(model="org/llama", settings=settings)) == [ids["d"], ids["b"], ids["a"]]
    assert _ids(history(engine_version="0.9.1", settings=settings)) == [ids["d"], ids["c"]]
    assert _ids(history(since="2026-11-28", settings=settings)) == [ids["d"], ids["c"], ids["b"]]
    assert _ids(history(since="2026-11-30T05:30", settings=settings)) == [ids["d"]]
    assert _ids(history(host="gpu-1", since="2026-11-02", settings=settings)) == [ids["b"]]
    assert _ids(history(limit=1, settings=settings)) == [ids["d"]]
    resolve(ids["c"], fix="NCCL_P2P_DISABLE=1", settings=settings)
    assert _ids(history(status="resolved", settings=settings)) == [ids["c"]]
    assert _ids(history(status="open", settings=settings)) == [ids["d"], ids["b"], ids["a"]]
    with pytest.raises(ValueError, match="since"):
        history(since="last tuesday", settings=settings)
    with pytest.raises(ValueError, match="status"):
        history(status="closed", settings=settings)


def test_history_since_relative(settings: Settings) -> None:
    record(make_diagnosis(), source="cli", settings=settings)
    assert len(history(since="30m", settings=settings)) == 1
    assert len(history(since="12h", settings=settings)) == 1


def test_text_search(settings: Settings) -> None:
    ids = _seed(settings)
    assert _ids(history(search="cache blocks", settings=settings)) == [ids["b"], ids["a"]]
    assert _ids(history(search="NCCL", settings=settings)) == [ids["c"]]
    assert _ids(history(search="nccl unhandled", settings=settings)) == [ids["c"]]
    # problem and cause names are searchable too
    assert _ids(history(search="oom-under-load", settings=settings)) == [ids["d"]]
    assert len(history(search="max-model-len", settings=settings)) == 4
    # combined with filters
    assert _ids(history(search="memory", host="gpu-3", settings=settings)) == [ids["d"]]
    assert history(search="nothing-like-this-anywhere", settings=settings) == []
    # tokens are runs of letters and digits on both engines; punctuation joins them in phrases
    assert _ids(history(search="gpu_memory_utilization", settings=settings)) == [
        ids["b"],
        ids["a"],
    ]
    assert _ids(history(search="version 2.21.5", settings=settings)) == [ids["c"]]
    assert _ids(history(search="CUDA-out-of-memory", settings=settings)) == [ids["d"]]
    assert history(search="out-of-CUDA", settings=settings) == []
    assert history(search="--- ...", settings=settings) == []
    # query syntax in a paste is text, not operators
    for odd in ('NEAR(cache "blocks', "cache* OR -x:", "AND", "'); DROP TABLE x; --"):
        history(search=odd, settings=settings)


def test_history_rendering(settings: Settings) -> None:
    ids = _seed(settings)
    rows = history(settings=settings)
    text = format_history_text(rows)
    assert f"#{ids['c']} " in text and "gpu-2" in text
    assert "g1" not in text.split()  # group ids are internal
    data = json.loads(format_history_json(rows))
    assert [d["incident_id"] for d in data] == _ids(rows)
    assert data[0]["created_at"].startswith("2026-11-30T06:00:00")
    assert format_history_text([]) == "no incidents match"


def test_resolve_then_recurrence_reports_last_fix(settings: Settings) -> None:
    first = record(make_diagnosis(PASTE_1), source="cli", settings=settings)
    assert first.incident_id is not None
    g = resolve(
        first.incident_id,
        fix="--max-model-len 77824",
        note="fits now",
        who="alice",
        settings=settings,
    )
    assert (g.status, g.resolution_fix, g.resolved_by) == (
        "resolved",
        "--max-model-len 77824",
        "alice",
    )
    assert g.resolution_note == "fits now" and g.resolved_at is not None
    again = record(make_diagnosis(PASTE_2), source="cli", settings=settings)
    assert again.status == "open"  # it came back: reopened
    assert again.last_fix == "--max-model-len 77824"
    assert (again.last_fixed_by, again.last_fix_link) == ("alice", None)


def test_late_spooled_event_from_before_the_fix_does_not_reopen(settings: Settings) -> None:
    r = record(make_diagnosis(PASTE_1), source="cli", settings=settings)
    resolve(f"g{r.group_id}", fix="restart", settings=settings)
    late = record(
        make_diagnosis(PASTE_2),
        source="cli",
        settings=settings,
        created_at=at(0, day=1),
    )
    assert late.status == "resolved" and late.count == 2
    assert late.first_seen == at(0, day=1)


def test_resolve_unknown_incident(settings: Settings) -> None:
    record(make_diagnosis(), source="cli", settings=settings)
    with pytest.raises(LookupError, match="no incident 999"):
        resolve(999, fix="x", settings=settings)
    with pytest.raises(LookupError, match="no group g999"):
        resolve("g999", fix="x", settings=settings)
    with pytest.raises(ValueError):
        resolve("banana", fix="x", settings=settings)


@pytest.mark.slow
def test_feedback(settings: Settings) -> None:
    r = record(make_diagnosis(), source="slack", settings=settings)
    assert r.incident_id is not None
    fid = feedback(r.incident_id, note="it was a tokenizer error", who="bob", settings=settings)
    feedback(f"g{r.group_id}", note="group-level note", kind="note", settings=settings)
    with get_engine(settings.database_url).connect() as conn:
        rows = conn.execute(select(Feedback.__table__).order_by(Feedback.id)).all()
    assert [(f.id, f.kind, f.event_id, f.group_id, f.who) for f in rows] == [
        (fid, "wrong_diagnosis", r.incident_id, r.group_id, "bob"),
        (rows[1].id, "note", None, r.group_id, None),
    ]


def test_command_audit(settings: Settings) -> None:
    rid = record_command(
        host="gpu-1",
        command_id="nvidia-smi-query",
        duration_s=0.42,
        exit_code=0,
        bytes_out=1234,
        run_id="run-1",
        who="U1",
        settings=settings,
    )
    record_command(
        host="gpu-1",
        command_id="journalctl-vllm",
        duration_s=10.0,
        exit_code=None,
        bytes_out=0,
        error="timed out after 10 s",
        settings=settings,
    )
    assert rid is not None
    with get_engine(settings.database_url).connect() as conn:
        rows = conn.execute(select(CommandAudit.__table__).order_by(CommandAudit.id)).all()
    assert [(r.command_id, r.exit_code, r.bytes_out, r.error) for r in rows] == [
        ("nvidia-smi-query", 0, 1234, None),
        ("journalctl-vllm", None, 0, "timed out after 10 s"),
    ]
    assert rows[0].duration_s == pytest.approx(0.42)


def test_unmatched_diagnosis_is_stored_too(settings: Settings) -> None:
    d = make_diagnosis("tokenizer.json not found", problem=None, host=None)
    r = record(d, source="cli", settings=settings)
    assert r.count == 1
    row = history(settings=settings)[0]
    assert row.problem_id is None and row.host is None
    assert "no match" in format_history_text([row])


def test_text_search_on_old_rows(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL's second pass (GIN bitmap over the older rows) gives the same answers."""
    ids = _seed(settings)
    monkeypatch.setattr(store_search, "PG_WALK_ROWS", 1)
    assert _ids(history(search="cache blocks", settings=settings)) == [ids["b"], ids["a"]]
    assert _ids(history(search="memory", limit=2, settings=settings)) == [ids["d"], ids["b"]]
    assert _ids(history(search="memory", host="gpu-1", settings=settings)) == [ids["b"], ids["a"]]
    resolve(ids["a"], fix="x", settings=settings)
    assert _ids(history(search="memory", status="open", settings=settings)) == [ids["d"]]


def test_the_group_is_the_core_s_fingerprint_and_its_inputs(settings: Settings) -> None:
    d = make_diagnosis(PASTE_1, host="GPU-1")
    r = record(d, source="cli", settings=settings)
    g = get_group(r.incident_id or 0, settings=settings)
    assert r.fingerprint == g.fingerprint == d.fingerprint.digest
    assert g.grouped_by == d.fingerprint.parts()


def test_a_thread_s_incident_is_its_newest_and_found_by_its_index(settings: Settings) -> None:
    from sqlalchemy.dialects import sqlite

    from bot.store import thread_incident
    from bot.store.repository import thread_incident_query

    first = record(make_diagnosis(PASTE_1), source="slack", channel="C1", thread="1.2",
                   settings=settings)
    record(make_diagnosis(PASTE_2), source="slack", channel="C1", thread="9.9",
           settings=settings)
    newest = record(make_diagnosis(PASTE_2), source="slack", channel="C1", thread="1.2",
                    settings=settings)
    assert first.incident_id != newest.incident_id
    assert thread_incident("C1", "1.2", settings=settings) == newest.incident_id
    assert thread_incident("C2", "1.2", settings=settings) is None
    if settings.database_url.startswith("sqlite"):
        sql = str(thread_incident_query("C1", "1.2").compile(
            dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
        with get_engine(settings.database_url).connect() as conn:
            plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}"))
        assert "ix_incident_events_channel_thread" in plan, plan


def test_an_incident_s_origin_is_its_channel_and_the_stored_fix(settings: Settings) -> None:
    from bot.store import incident_origin

    r = record(make_diagnosis(PASTE_1), source="slack", channel="C42", thread="1.2",
               settings=settings)
    assert r.incident_id is not None
    origin = incident_origin(r.incident_id, "lower-max-model-len", settings=settings)
    assert origin is not None and origin.channel == "C42"
    # remembered by the flags it sets, which read the same whatever else the server had
    assert origin.fix_command == "--max-model-len 77824"
    other = incident_origin(r.incident_id, "no-such-fix", settings=settings)
    assert other is not None and other.fix_command is None
    assert incident_origin(10_000, None, settings=settings) is None


def test_a_slack_event_key_is_claimed_once(settings: Settings) -> None:
    from datetime import timedelta

    from bot.store import claim_event_key

    assert claim_event_key("msg:C1:1.2", settings=settings)
    assert not claim_event_key("msg:C1:1.2", settings=settings)
    # pruning old keys in the same transaction makes the key claimable again
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert claim_event_key("msg:C1:1.2", prune_before=later, settings=settings)
