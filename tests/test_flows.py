"""The use cases every adapter shares (bot.flows): a diagnosis recorded with what became of
the record, and a store that cannot be used turned into one error for the terminal and Slack
alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings
from bot.flows import (
    Asker,
    HistoryQuery,
    NotStored,
    Spooled,
    Stored,
    StoreDown,
    diagnose_and_record,
    history,
    resolve,
)
from bot.kb.loader import KB, load_kb
from bot.render.text import render

ROOT = Path(__file__).resolve().parent.parent
PASTE = (ROOT / "examples" / "vllm-max-model-len.log").read_text()
ALICE = Asker(origin="cli", user="alice")
# Nothing listens on port 1: refused at once, as a database that is down.
DOWN = "postgresql+psycopg://postgres@127.0.0.1:1/inferbot"


@pytest.fixture(scope="module")
def kb() -> KB:
    return load_kb()


def test_a_stored_diagnosis_carries_its_incident_and_the_history_line(
        kb: KB, tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", spool_dir=tmp_path / "sp")
    first = diagnose_and_record(PASTE, ALICE, kb, host="gpu-07", settings=settings)
    again = diagnose_and_record(PASTE, ALICE, kb, host="gpu-07", settings=settings)
    assert isinstance(first.record, Stored) and isinstance(again.record, Stored)
    assert first.diagnosis.incident_id == first.record.incident_id == 1
    # the terminal's answer: the history line right after the headline, naming the incident
    for answer, said in ((first, "incident 1: first time seen"),
                         (again, "incident 2: seen 2 times in 1 day on gpu-07; never marked "
                                 "fixed")):
        assert isinstance(answer.record, Stored)
        lines = render(answer.diagnosis, answer.record.history).splitlines()
        assert lines.index("  " + said) == lines.index("Run:") - 1
    rows = history(HistoryQuery(host="gpu-07"), settings)
    assert [(r.incident_id, r.source, r.user) for r in rows] == [(2, "cli", "alice"),
                                                                 (1, "cli", "alice")]


def test_a_database_outage_spools_and_another_failure_is_one_line(
        kb: KB, tmp_path: Path) -> None:
    down = Settings(database_url=DOWN, spool_dir=tmp_path / "spool")
    answer = diagnose_and_record(PASTE, ALICE, kb, settings=down)
    assert isinstance(answer.record, Spooled) and "spooled to" in answer.record.warning
    assert answer.diagnosis.problems  # the answer was given all the same
    assert list((tmp_path / "spool").glob("*.json"))

    garbage = tmp_path / "not-a-database"
    garbage.write_bytes(b"password=hunter2\n" * 512)  # a file that is no SQLite database
    odd = Settings(database_url=f"sqlite:///{garbage}", spool_dir=tmp_path / "spool2")
    answer = diagnose_and_record(PASTE, ALICE, kb, settings=odd)
    assert isinstance(answer.record, NotStored)
    assert "not a database" in answer.record.reason
    assert "\n" not in answer.record.reason and "hunter2" not in answer.record.reason
    assert not diagnose_and_record(PASTE, ALICE, kb, store=False, settings=odd).record


def test_a_store_that_cannot_be_used_is_store_down_for_every_flow(tmp_path: Path) -> None:
    down = Settings(database_url=DOWN, spool_dir=tmp_path / "spool")
    with pytest.raises(StoreDown, match=r"127\.0\.0\.1"):
        history(HistoryQuery(), down)
    with pytest.raises(StoreDown):
        resolve(1, ALICE, fix="--max-model-len 32768", settings=down)


def test_what_people_type_is_redacted_before_it_is_stored(kb: KB, tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", spool_dir=tmp_path / "sp")
    answer = diagnose_and_record(PASTE, ALICE, kb, settings=settings)
    assert isinstance(answer.record, Stored)
    group = resolve(answer.record.incident_id, ALICE, settings=settings,
                    fix="export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 and retry")
    assert group.resolution_fix is not None and "hf_abcdefghij" not in group.resolution_fix


def test_a_database_from_a_newer_inferbot_is_one_line_on_the_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy import text

    from bot.cli import main
    from bot.store.db import dispose_engines, get_engine

    url = f"sqlite:///{tmp_path / 'db'}"
    monkeypatch.setenv("INFERBOT_DATABASE_URL", url)
    assert main(["db", "upgrade"]) == 0
    with get_engine(url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    dispose_engines()  # a new process: it has not seen this database yet
    capsys.readouterr()
    assert main(["history"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("inferbot: the incident database is unavailable: the database schema "
                          "is at revision 0999, newer than this inferbot knows (")
    assert err.endswith("); upgrade inferbot\n") and err.count("\n") == 1
    dispose_engines()


def test_pastes_that_match_nothing_do_not_share_one_group(kb: KB, tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db'}", spool_dir=tmp_path / "sp")

    def traceback(exc: str, where: str) -> str:
        return (f'Traceback (most recent call last):\n  File "{where}", line 3, in <module>\n'
                f"{exc}: something went wrong\n")

    pastes = [traceback("json.decoder.JSONDecodeError", "/home/me/app.py"),
              traceback("KeyError", "/srv/venv/lib/python3.12/site-packages/requests/x.py"),
              "hello, is anyone there?",
              traceback("json.decoder.JSONDecodeError", "/home/me/other.py")]
    answers = [diagnose_and_record(p, ALICE, kb, settings=settings) for p in pastes]
    groups = [a.record.group_id for a in answers if isinstance(a.record, Stored)]
    assert len(groups) == 4 and len(set(groups[:3])) == 3  # unrelated: three groups
    assert groups[3] == groups[0]  # the same exception type: one group
    first = answers[0].diagnosis
    assert first.exception is not None and first.exception.type == "JSONDecodeError"
    from bot.render.text import render

    assert "A Python JSONDecodeError in your code, not an engine or GPU message" in render(
        first)
    assert "raised in requests" in render(answers[1].diagnosis)
