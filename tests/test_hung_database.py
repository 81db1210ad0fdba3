"""A database that hangs instead of refusing: PostgreSQL paused (SIGSTOP, a cluster of the
test's own) and an SQLite file another process holds locked. The answer still comes in time,
the incident is spooled, and it is written once after the database returns."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.config import Settings
from tests.fixtures.postgres import Cluster
from tests.fixtures.slack import make_settings, serving
from tests.slack.fakes import Call, FakeSlack
from tests.slack.test_http import VLLM_ERROR, all_text, mention
from tests.test_cli_store import EXAMPLE, ROOT, TITLE

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def events_in(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM incident_events")).scalar_one())
    finally:
        engine.dispose()


def wait_until(check: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def cli(url: str, spool: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "INFERBOT_DATABASE_URL": url,
           "INFERBOT_SPOOL_DIR": str(spool), "HOME": str(spool.parent)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    return done, time.monotonic() - start


def assert_answered_in_time(done: subprocess.CompletedProcess[str], took: float) -> None:
    assert took < 10, f"the CLI took {took:.1f} s"
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == TITLE
    warning = done.stderr.strip().splitlines()
    assert len(warning) == 1 and "spooled" in warning[0] and "Traceback" not in done.stderr


@contextmanager
def sqlite_locked(path: Path) -> Iterator[None]:
    """Another connection holds the write lock (what a stuck writer or a backup does)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=1)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


# --------------------------------------------------------------------------- the CLI


def test_cli_with_postgresql_paused(own_pg: Cluster, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    done, _ = cli(own_pg.url, spool, "diagnose", str(EXAMPLE))
    assert done.returncode == 0 and events_in(own_pg.url) == 1
    own_pg.pause()
    try:
        done, took = cli(own_pg.url, spool, "diagnose", str(EXAMPLE))
        print(f"\nCLI with PostgreSQL paused: answered and exited in {took:.1f} s")
        assert_answered_in_time(done, took)
        assert len(list(spool.glob("*.json"))) == 1
        for args in (["history"], ["resolve", "1", "--fix", "--max-model-len 32768"]):
            done, took = cli(own_pg.url, spool, *args)
            print(f"{args[0]} with PostgreSQL paused: exit {done.returncode} in {took:.1f} s")
            assert took < 10 and done.returncode == 1 and not done.stdout
            assert done.stderr.splitlines() == [
                "inferbot: the incident database is unavailable: the database did not answer "
                "within 4 s"]
    finally:
        own_pg.resume()
    done, _ = cli(own_pg.url, spool, "history", "--json")
    assert done.returncode == 0
    assert events_in(own_pg.url) == 2 and not list(spool.glob("*.json"))


def test_cli_with_the_sqlite_file_locked(tmp_path: Path) -> None:
    db, spool = tmp_path / "incidents.db", tmp_path / "spool"
    url = f"sqlite:///{db}"
    assert cli(url, spool, "diagnose", str(EXAMPLE))[0].returncode == 0
    with sqlite_locked(db):
        done, took = cli(url, spool, "diagnose", str(EXAMPLE))
    print(f"\nCLI with the SQLite file locked: answered and exited in {took:.1f} s")
    assert_answered_in_time(done, took)
    assert cli(url, spool, "history", "--json")[0].returncode == 0
    assert events_in(url) == 2 and not list(spool.glob("*.json"))


# --------------------------------------------------------------------------- Slack


def _timed_answer(fake: FakeSlack, ts: str, sent: float) -> tuple[float, float, Call]:
    """Seconds to the placeholder and to the answer in thread `ts`."""
    placeholder = answer = None
    deadline = time.monotonic() + 30
    while answer is None and time.monotonic() < deadline:
        for call in fake.recorder.of("chat.postMessage"):
            if call.args.get("thread_ts") == ts and placeholder is None:
                placeholder = call.at - sent
        posted = {c.response.get("ts") for c in fake.recorder.of("chat.postMessage")
                  if c.args.get("thread_ts") == ts}
        for call in fake.recorder.of("chat.update"):
            if call.args.get("ts") in posted:
                answer = call
        time.sleep(0.02)
    assert placeholder is not None and answer is not None, "no answer in 30 s"
    return placeholder, answer.at - sent, answer


def _hung_then_back(fake: FakeSlack, settings: Settings, hang: Callable[[], object],
                    back: Callable[[], object], count: Callable[[], int]) -> None:
    with serving(settings, fake) as endpoint:
        assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172000.000100",
                                      event_id="Ev0WARM00001"))[0] == 200
        _timed_answer(fake, "1717172000.000100", time.monotonic())
        hang()
        try:
            sent = time.monotonic()
            assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172100.000100",
                                          event_id="Ev0HUNG00001"))[0] == 200
            placeholder, answered, answer = _timed_answer(fake, "1717172100.000100", sent)
            print(f"\nplaceholder after {placeholder:.2f} s, answer after {answered:.1f} s")
            assert placeholder < 1 and answered < 10
            assert TITLE in all_text(answer.args)
            assert len(list(settings.spool_dir.glob("*.json"))) >= 1
        finally:
            back()
        # the next message after the database returns writes what was spooled
        assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172200.000100",
                                      event_id="Ev0BACK00001"))[0] == 200
        _timed_answer(fake, "1717172200.000100", time.monotonic())
        assert wait_until(lambda: count() == 3 and not list(settings.spool_dir.glob("*.json")))


@pytest.mark.slack
def test_slack_with_postgresql_paused(own_pg: Cluster, fake: FakeSlack, tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(fake, tmp_path, database_url=own_pg.url)
    _hung_then_back(fake, settings, own_pg.pause, own_pg.resume,
                    lambda: events_in(own_pg.url))
    assert "Traceback" not in caplog.text


@pytest.mark.slack
def test_slack_with_the_sqlite_file_locked(fake: FakeSlack, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(fake, tmp_path)
    db = tmp_path / "inferbot.db"
    holder: list[sqlite3.Connection] = []

    def lock() -> None:
        conn = sqlite3.connect(db, isolation_level=None, timeout=1)
        conn.execute("BEGIN EXCLUSIVE")
        holder.append(conn)

    def unlock() -> None:
        holder[0].rollback()
        holder[0].close()

    _hung_then_back(fake, settings, lock, unlock, lambda: events_in(f"sqlite:///{db}"))
    assert "Traceback" not in caplog.text


# --------------------------------------------------------------------------- reply once


@pytest.mark.slack
def test_a_key_claimed_during_an_outage_is_recorded_for_the_other_replica(
        own_pg: Cluster, fake: FakeSlack, tmp_path: Path) -> None:
    """Replica A answers while PostgreSQL is down; once it is back A records the key, so
    Slack's retry reaching replica B is not answered a second time."""
    from tests.fixtures.slack import serve_env, serve_process

    env = serve_env(fake, tmp_path, INFERBOT_DATABASE_URL=own_pg.url,
                    INFERBOT_SPOOL_DIR=str(tmp_path / "spool"), INFERBOT_DB_DEADLINE_S="2")
    event = mention(f"```{VLLM_ERROR}```", ts="1717173000.000100", event_id="Ev0OUTAGE001")
    with serve_process(env, fake) as (a, _), serve_process(env, fake) as (b, _):
        assert a.event(mention("help", ts="1717172900.000100"))[0] == 200  # schema in place
        fake.recorder.wait_for("chat.postMessage")
        own_pg.stop()
        try:
            assert a.event(event)[0] == 200
            _timed_answer(fake, "1717173000.000100", time.monotonic())
        finally:
            own_pg.start()

        def key_recorded() -> bool:
            from sqlalchemy import create_engine, text

            engine = create_engine(own_pg.url)
            try:
                with engine.connect() as conn:
                    return bool(conn.execute(text(
                        "SELECT count(*) FROM slack_event_keys WHERE key = :k"),
                        {"k": "msg:C0INCIDENT1:1717173000.000100"}).scalar_one())
            except Exception:
                return False
            finally:
                engine.dispose()

        assert wait_until(key_recorded, timeout=30)
        assert b.event(event, headers={"X-Slack-Retry-Num": "1",
                                       "X-Slack-Retry-Reason": "http_timeout"})[0] == 200
        fake.recorder.settle(quiet=1.5)
    in_thread = [c for c in fake.posts() if c.args.get("thread_ts") == "1717173000.000100"]
    answers = [c for c in fake.recorder.of("chat.update")
               if c.args.get("ts") in {p.response.get("ts") for p in in_thread}]
    assert len(in_thread) == 1 and len(answers) == 1
    assert TITLE in json.dumps(answers[0].args)
