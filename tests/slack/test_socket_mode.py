"""Socket Mode against a local WebSocket server: the same listeners, acked by envelope id."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from pydantic import SecretStr

from bot.config import Settings
from bot.slack.app import build, socket_mode
from tests.slack.fakes import APP_TOKEN, FakeSlack, FakeSocketMode, load

pytestmark = pytest.mark.slack


@pytest.mark.slow
def test_a_mention_over_socket_mode_is_acked_and_answered_once(fake: FakeSlack,
                                                          settings: Settings) -> None:
    ws = FakeSocketMode()
    fake.ws_url = ws.url
    envelope: dict[str, Any] = copy.deepcopy(load("socket_mode_events_api_envelope.json"))
    envelope["payload"]["event"]["text"] = "<@U0BOT00001> help"
    redelivered = copy.deepcopy(envelope)
    redelivered.update(envelope_id="7a2b9c40-redelivery", retry_attempt=2)
    ws.envelopes.extend([envelope, redelivered])
    s = settings.model_copy(update={"app_token": SecretStr(APP_TOKEN)})
    bot = build(s, http=False)
    handler = socket_mode(bot.app, s)
    try:
        handler.connect()
        acks = ws.wait_for_acks(2)
        assert [a["envelope_id"] for a in acks] == [envelope["envelope_id"], "7a2b9c40-redelivery"]
        reply = fake.recorder.wait_for("chat.postMessage")[0].args
        assert reply["thread_ts"] == envelope["payload"]["event"]["ts"]
        assert "history" in json.dumps(reply["blocks"])
        opened = fake.recorder.of("apps.connections.open")[0]
        assert opened.auth == f"Bearer {APP_TOKEN}"
        assert ws.request_lines[0].startswith("GET /link/?ticket=test ")
        time.sleep(0.5)
        assert len(fake.posts()) == 1  # the redelivery was acknowledged, not answered again
    finally:
        handler.close()
        bot.close()
        ws.close()


def test_socket_mode_without_an_app_token_says_what_to_set(settings: Settings) -> None:
    with pytest.raises(ValueError, match="SLACK_APP_TOKEN"):
        socket_mode(build(settings, http=False).app, settings)


@pytest.mark.slow
def test_after_the_socket_drops_the_bot_reconnects_and_answers_the_next_mention_once(
        fake: FakeSlack, settings: Settings) -> None:
    ws = FakeSocketMode()
    fake.ws_url = ws.url

    def envelope(n: int) -> dict[str, Any]:
        e: dict[str, Any] = copy.deepcopy(load("socket_mode_events_api_envelope.json"))
        e["envelope_id"] = f"env-{n}"
        e["payload"]["event_id"] = f"Ev0SOCKET{n:03d}"
        e["payload"]["event"].update(text="<@U0BOT00001> help", ts=f"171717500{n}.000100")
        return e

    s = settings.model_copy(update={"app_token": SecretStr(APP_TOKEN)})
    bot = build(s, http=False)
    handler = socket_mode(bot.app, s)
    try:
        handler.connect()
        ws.wait_for_connections(1)
        ws.send(envelope(1))
        ws.wait_for_acks(1)
        fake.recorder.wait_for("chat.postMessage", 1)
        ws.drop()  # no close frame: what a network failure looks like
        ws.wait_for_connections(2, timeout=60)
        assert len(fake.recorder.of("apps.connections.open")) >= 2  # a fresh URL each time
        ws.send(envelope(2))
        acks = ws.wait_for_acks(2)
        assert [a["envelope_id"] for a in acks] == ["env-1", "env-2"]
        fake.recorder.wait_for("chat.postMessage", 2)
        time.sleep(1.0)
        threads = [c.args["thread_ts"] for c in fake.posts()]
        assert threads == ["1717175001.000100", "1717175002.000100"]  # each answered once
    finally:
        handler.close()
        bot.close()
        ws.close()
