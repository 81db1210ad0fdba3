"""Slack's own limits: about one message a second per channel (429 with Retry-After past it),
and App Home opened in bursts."""

from __future__ import annotations

import copy
import itertools

import pytest

from tests.fixtures.slack import ALLOWED, Endpoint
from tests.slack.fakes import FakeSlack, load
from tests.slack.test_http import mention

pytestmark = pytest.mark.slack


@pytest.mark.slow
def test_a_burst_of_50_mentions_in_one_channel_is_answered_in_order_without_a_retry_storm(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    fake.channel_window_s = 1.0  # Slack's pace, enforced by the fake with 429 Retry-After: 1
    fake.fail_next["chat.postMessage"] = 1  # and one 429 the bot did not cause
    threads = [f"17171900{i:02d}.000100" for i in range(50)]
    for i, ts in enumerate(threads):
        code, _, took = endpoint.event(mention("help", ts=ts, event_id=f"Ev0PACE{i:04d}"))
        assert code == 200 and took < 3
    posts = fake.recorder.wait_for("chat.postMessage", 50, timeout=180)
    fake.recorder.settle(quiet=1.5)
    answered = [c.args["thread_ts"] for c in fake.recorder.of("chat.postMessage")]
    assert answered == threads  # each once, in the order asked
    limited = fake.recorder.of("chat.postMessage#429")
    assert len(limited) <= 3, f"{len(limited)} rejected posts: a retry storm"
    # the one 429 was honoured: its retry waited for Retry-After (1 s)
    first = limited[0]
    retry = next(c for c in posts if c.args["thread_ts"] == first.args["thread_ts"])
    assert retry.at - first.at >= 0.9
    gaps = [b.at - a.at for a, b in itertools.pairwise(posts)]
    print(f"\n50 mentions in one channel: all answered in order in "
          f"{posts[-1].at - posts[0].at:.0f} s, {len(limited)} x 429, smallest gap "
          f"{min(gaps):.2f} s")


def test_app_home_is_rendered_once_per_burst_per_user(endpoint: Endpoint,
                                                      fake: FakeSlack) -> None:
    def opened(user: str, n: int) -> None:
        home = copy.deepcopy(load("app_mention_code_block.json"))
        home["event"] = {"type": "app_home_opened", "user": user, "channel": "D0HOME",
                         "tab": "home", "event_ts": f"17171726{n:02d}.000100"}
        home["event_id"] = f"Ev0HOME{user}{n}"
        assert endpoint.event(home)[0] == 200

    for n in range(10):
        opened(ALLOWED, n)
    opened("U0BOB00002", 0)
    fake.recorder.wait_for("views.publish", 2)
    fake.recorder.settle(quiet=1.0)
    assert sorted(c.args["user_id"] for c in fake.recorder.of("views.publish")) == [
        ALLOWED, "U0BOB00002"]
