"""A database that hangs instead of refusing: PostgreSQL paused (SIGSTOP, a cluster of the
test's own) and an SQLite file another process holds locked. The answer still comes in time,
the incident is spooled, and it is written once after the database returns."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.config import Settings
from tests.fixtures.postgres import Cluster
from tests.fixtures.slack import make_settings, serving
from tests.fixtures.sqlite import SqliteWriter, sqlite_locked
from tests.slack.fakes import Call, FakeSlack
from tests.slack.test_http import (
    THREAD,
    VLLM_ERROR,
    all_text,
    blocks_of,
    choose,
    click,
    element,
    final_answer,
    mention,
    note_submission,
    on,
)
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
    """Seconds to the placeholder posted in thread `ts` after `sent`, and to the answer that
    replaced it. `sent` is taken before the event is delivered: under load the worker can post
    the placeholder before the delivery's own HTTP response is read."""
    placeholder = answer = None
    deadline = time.monotonic() + 30
    while answer is None and time.monotonic() < deadline:
        mine = [c for c in fake.recorder.of("chat.postMessage")
                if c.args.get("thread_ts") == ts and c.at >= sent]
        if mine and placeholder is None:
            placeholder = mine[0].at - sent
        posted = {c.response.get("ts") for c in mine}
        for call in fake.recorder.of("chat.update"):
            if call.args.get("ts") in posted:
                answer = call
        time.sleep(0.02)
    assert placeholder is not None and answer is not None, "no answer in 30 s"
    return placeholder, answer.at - sent, answer


def _hung_then_back(fake: FakeSlack, settings: Settings, hang: Callable[[], object],
                    back: Callable[[], object], count: Callable[[], int]) -> None:
    with serving(settings, fake) as endpoint:
        sent = time.monotonic()
        assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172000.000100",
                                      event_id="Ev0WARM00001"))[0] == 200
        _timed_answer(fake, "1717172000.000100", sent)
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
        sent = time.monotonic()
        assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172200.000100",
                                      event_id="Ev0BACK00001"))[0] == 200
        _timed_answer(fake, "1717172200.000100", sent)
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
    writer = SqliteWriter(db)
    _hung_then_back(fake, settings, writer.hold, writer.release,
                    lambda: events_in(f"sqlite:///{db}"))
    assert "Traceback" not in caplog.text


# --------------------------------------------------------------------------- every path

DEADLINE_S = 2.0
IN_TIME_S = DEADLINE_S + 2  # "within a few seconds": the deadline, and the reply's own time


def _store_answers_again(settings: Settings) -> None:
    """Wait until the calls left behind at the hang have finished (until then the store
    fails fast), so the next path meets the hang's onset: its full deadline."""
    from bot.store import database_problem

    assert wait_until(lambda: database_problem(settings.database_url, 5) is None)


def _ephemeral_after(fake: FakeSlack, count: int, sent: float) -> tuple[float, str]:
    call = fake.recorder.wait_for("chat.postEphemeral", count, timeout=30)[count - 1]
    return call.at - sent, str(call.args["text"])


def _every_path_while_hung(fake: FakeSlack, settings: Settings, hang: Callable[[], object],
                           back: Callable[[], object], *, reads_hang: bool) -> None:
    """Each Slack path that asks the store, each at the onset of its own hang: answered
    within a few seconds, in one line that says the store is unavailable (a read that the
    hang does not block, an SQLite read beside a held write lock, may answer from the
    store), and a history mention does not hold the channel's next paste."""
    with serving(settings, fake) as endpoint:
        assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))[0] == 200
        answer = final_answer(fake)
        fake.recorder.wait_for("chat.getPermalink")
        fake.recorder.settle()
        shown = blocks_of(answer)
        fix = element(shown, "fix_worked")["options"][0]["value"]
        incident = int(fix.split(":")[0])
        endpoint.interaction(click("wrong_diagnosis", str(incident)))
        submission = note_submission(fake, "it was NCCL")
        timings: dict[str, float] = {}

        def at_onset(name: str, act: Callable[[float], float]) -> None:
            hang()
            try:
                timings[name] = act(time.monotonic())
            finally:
                back()
            _store_answers_again(settings)

        def history_then_paste(sent: float) -> float:
            assert endpoint.event(mention("history since 7d", ts="1717172300.000100",
                                          event_id="Ev0HISTHUNG1"))[0] == 200
            time.sleep(1.0)  # the next mention a second later, past the channel's pace
            paste_sent = time.monotonic()
            assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172301.000100",
                                          event_id="Ev0PASTEHUNG"))[0] == 200
            placeholder, answered, reply = _timed_answer(fake, "1717172300.000100", sent)
            assert placeholder < 1
            assert "The incident store is unavailable" in all_text(reply.args)
            paste_placeholder, paste_answered, paste = _timed_answer(
                fake, "1717172301.000100", paste_sent)
            timings["paste placeholder behind it"] = paste_placeholder
            timings["paste answer behind it"] = paste_answered
            assert paste_placeholder < 1 and paste_answered < 10
            assert TITLE in all_text(paste.args)
            return answered

        def resolve(sent: float) -> float:
            assert endpoint.event(mention("resolve --max-model-len 32768",
                                          ts="1717172400.000100", thread_ts=THREAD,
                                          event_id="Ev0RESHUNG01"))[0] == 200
            placeholder, answered, reply = _timed_answer(fake, THREAD, sent)
            assert placeholder < 1
            assert all_text(reply.args).count("\n") == 0
            assert "The incident store is unavailable" in all_text(reply.args)
            return answered

        def ephemeral(body: dict[str, object], count: int) -> Callable[[float], float]:
            def act(sent: float) -> float:
                assert endpoint.interaction(body)[0] == 200
                took, text = _ephemeral_after(fake, count, sent)
                assert "\n" not in text and "The incident store is unavailable" in text
                return took
            return act

        def details(sent: float) -> float:
            edits = len(fake.recorder.of("chat.update"))
            ephemerals = len(fake.recorder.of("chat.postEphemeral"))
            value = element(shown, "details")["value"]
            assert endpoint.interaction(on(click("details", value), answer["ts"]))[0] == 200
            while time.monotonic() - sent < 30:
                if len(fake.recorder.of("chat.postEphemeral")) > ephemerals:
                    took, text = _ephemeral_after(fake, ephemerals + 1, sent)
                    assert "\n" not in text and "The incident store is unavailable" in text
                    return took
                if not reads_hang and len(fake.recorder.of("chat.update")) > edits:
                    return fake.recorder.of("chat.update")[-1].at - sent
                time.sleep(0.02)
            raise AssertionError("Details got no answer in 30 s")

        def home(sent: float) -> float:
            opened = {"type": "app_home_opened", "user": "U0ALICE001", "channel": "D0HOME",
                      "tab": "home", "event_ts": "1717172600.000100"}
            assert endpoint.event({**mention("x"), "event": opened,
                                   "event_id": "Ev0HOMEHUNG1"})[0] == 200
            view = fake.recorder.wait_for("views.publish", timeout=30)[0]
            if reads_hang:
                assert "The incident store is unavailable" in json.dumps(view.args["view"])
            return view.at - sent

        at_onset("history mention", history_then_paste)
        at_onset("resolve mention", resolve)
        fixed = choose("fix_worked", fix, message_ts=answer["ts"])
        at_onset("This fixed it", ephemeral(fixed, 1))
        at_onset("Mark fix failed", ephemeral(click("fix_failed", fix), 2))
        at_onset("Not right? note", ephemeral(submission, 3))
        at_onset("Details", details)
        at_onset("App Home", home)
    print("\n" + "; ".join(f"{name} {took:.2f} s" for name, took in timings.items()))
    for name, took in timings.items():
        assert took < IN_TIME_S, f"{name}: {took:.1f} s"


@pytest.mark.slack
def test_every_slack_path_answers_while_postgresql_hangs(
        own_pg: Cluster, fake: FakeSlack, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(fake, tmp_path, database_url=own_pg.url, db_deadline_s=DEADLINE_S)
    _every_path_while_hung(fake, settings, own_pg.pause, own_pg.resume, reads_hang=True)
    assert "Traceback" not in caplog.text


@pytest.mark.slack
def test_every_slack_path_answers_while_the_sqlite_file_is_locked(
        fake: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(fake, tmp_path, db_deadline_s=DEADLINE_S)
    writer = SqliteWriter(tmp_path / "inferbot.db")
    _every_path_while_hung(fake, settings, writer.hold, writer.release, reads_hang=False)
    assert "Traceback" not in caplog.text


# --------------------------------------------------------------------------- migrating


@pytest.mark.slack
def test_serve_migrates_before_it_listens_and_a_long_migration_holds_no_answer(
        fake: FakeSlack, tmp_path: Path) -> None:
    """`serve` migrates a store behind its schema before it takes requests, where nothing
    waits on it. One that takes longer than the deadline (here: another writer holds the
    SQLite file) goes on in the background while mentions are answered and spooled."""
    from bot.store.db import HEAD, dispose_engines, get_engine, migrate
    from tests.fixtures.slack import serve_env, serve_process
    from tests.test_cli_store import revision

    db, spool, log = tmp_path / "db.sqlite", tmp_path / "spool", tmp_path / "serve.log"
    migrate(get_engine(f"sqlite:///{db}"), "0002")
    dispose_engines()
    env = serve_env(fake, tmp_path, INFERBOT_SPOOL_DIR=str(spool), INFERBOT_DB_DEADLINE_S="1")
    writer = SqliteWriter(db)
    writer.hold()
    try:
        with serve_process(env, fake, stderr=log) as (endpoint, _):
            assert "incident store not ready" in log.read_text()
            sent = time.monotonic()
            assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717174000.000100",
                                          event_id="Ev0MIGRATE01"))[0] == 200
            placeholder, answered, answer = _timed_answer(fake, "1717174000.000100", sent)
            print(f"\nduring the migration: placeholder after {placeholder:.2f} s, answer "
                  f"after {answered:.1f} s")
            assert placeholder < 1 and answered < 10 and TITLE in all_text(answer.args)
            assert "incident store is down" in all_text(answer.args)
            writer.release()
            assert wait_until(lambda: revision(db) == HEAD)  # no mention needed for it
            sent = time.monotonic()
            assert endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717174100.000100",
                                          event_id="Ev0MIGRATE02"))[0] == 200
            _timed_answer(fake, "1717174100.000100", sent)
            assert wait_until(lambda: events_in(f"sqlite:///{db}") == 2
                              and not list(spool.glob("*.json")))
    finally:
        if writer.conn is not None:
            writer.release()
    assert "Traceback" not in log.read_text()


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
            sent = time.monotonic()
            assert a.event(event)[0] == 200
            _timed_answer(fake, "1717173000.000100", sent)
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
