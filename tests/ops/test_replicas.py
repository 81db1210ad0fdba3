"""Two `inferbot serve --http` replicas on one PostgreSQL database behave as one bot."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.fixtures.slack import Endpoint, make_settings, serve_env, serve_process, serving
from tests.slack.fakes import FakeSlack
from tests.slack.test_http import VLLM_ERROR, all_text, mention, reply_in

pytestmark = [pytest.mark.slack, pytest.mark.postgres]
PROBLEM = "max-model-len-exceeds-kv-cache"
TITLE = "max_model_len needs more KV cache than the GPU has left"  # what people read


def get(endpoint: Endpoint, path: str) -> tuple[int, str]:
    url = endpoint.url.rsplit("/slack/events", 1)[0] + path
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


def sample(exposition: str, name: str) -> float:
    """One sample's value from the text exposition (0 when absent)."""
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def replicas(fake: FakeSlack, tmp_path: Path, pg_url: str) -> Iterator[list[Endpoint]]:
    env = serve_env(fake, tmp_path, INFERBOT_DATABASE_URL=pg_url,
                    INFERBOT_SPOOL_DIR=str(tmp_path / "spool"))
    with ExitStack() as stack:
        yield [stack.enter_context(serve_process(env, fake))[0] for _ in range(2)]


@pytest.mark.slow
def test_the_same_event_on_two_replicas_gets_one_reply_and_both_count_it(
        replicas: list[Endpoint], fake: FakeSlack) -> None:
    event = mention(f"```{VLLM_ERROR}```")
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda ep=ep: statuses.append(ep.event(event)[0]))
               for ep in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200, 200]
    fake.recorder.wait_for("chat.update")
    fake.recorder.settle(quiet=1.0)
    assert len(fake.posts()) == 1  # the "Looking..." message, then updated with the answer

    diag = f'inferbot_diagnoses_total{{problem="{PROBLEM}"}}'
    hit = 'inferbot_dedup_hits_total{where="database"}'
    deadline = time.monotonic() + 15
    while True:
        pages = [get(ep, "/metrics")[1] for ep in replicas]
        counts = sorted((sample(p, diag), sample(p, hit)) for p in pages)
        if counts == [(0.0, 1.0), (1.0, 0.0)] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert counts == [(0.0, 1.0), (1.0, 0.0)], pages
    replied = next(p for p in pages if sample(p, diag) == 1.0)
    assert sample(replied, 'inferbot_reply_seconds_count{verb="paste"}') == 1.0
    assert "# TYPE inferbot_reply_seconds histogram" in replied

    for ep in replicas:
        status, body = get(ep, "/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok", "database": "ok"}

    # Shared history: the replica that did not answer knows the incident the other stored.
    other = replicas[[sample(p, diag) for p in pages].index(0.0)]
    other.event(mention("history", ts="1717171900.000100", event_id="Ev0HISTORY01"))
    assert TITLE in all_text(reply_in(fake, "1717171900.000100"))


def test_healthz_reports_a_database_outage_as_degraded_not_down(fake: FakeSlack,
                                                                tmp_path: Path) -> None:
    """Answers go on while the database is down (incidents are spooled), so the replica must
    stay in the load balancer: 200, with the outage in the body."""
    down = make_settings(fake, tmp_path, database_url="postgresql://u:secretpw@127.0.0.1:9/x")
    with serving(down, fake) as ep:
        status, body = get(ep, "/healthz")
    report = json.loads(body)
    assert status == 200 and report["status"] == "degraded"
    assert report["database"].startswith("unavailable: ") and "secretpw" not in body
