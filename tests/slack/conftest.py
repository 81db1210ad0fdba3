"""Fixtures for the Slack tests: the fake Web API, Settings pointing at it, the real Bolt HTTP
endpoint on a loopback port, and signed requests."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from slack_sdk.signature import SignatureVerifier

from bot.config import Settings
from tests.slack.fakes import BOT_TOKEN, FakeSlack

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ALLOWED = "U0ALICE001"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slack: needs the real Bolt HTTP endpoint on loopback")


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    server = FakeSlack()
    yield server
    server.close()


def make_settings(fake: FakeSlack, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "INFERBOT_BOT_TOKEN": BOT_TOKEN,
        "INFERBOT_SIGNING_SECRET": SECRET,
        "slack_api_url": fake.api_url,
        "database_url": f"sqlite:///{tmp_path / 'inferbot.db'}",
        "spool_dir": tmp_path / "spool",
        "allowed_users": [ALLOWED],
        "max_file_bytes": 64 * 1024,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings(fake: FakeSlack, tmp_path: Path) -> Settings:
    return make_settings(fake, tmp_path)


@dataclass
class Endpoint:
    url: str
    fake: FakeSlack

    def post(self, body: bytes, content_type: str, *, ts: int | None = None,
             secret: str = SECRET, headers: dict[str, str] | None = None
             ) -> tuple[int, bytes, float]:
        """POST a signed request; (status, body, seconds to the response)."""
        stamp = str(ts if ts is not None else int(time.time()))
        signature = str(SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body))
        req = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signature, **(headers or {})})
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read(), time.monotonic() - start
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), time.monotonic() - start

    def event(self, payload: dict[str, Any], **kw: Any) -> tuple[int, bytes, float]:
        return self.post(json.dumps(payload).encode(), "application/json", **kw)

    def command(self, fields: dict[str, str], **kw: Any) -> tuple[int, bytes, float]:
        return self.post(urlencode(fields).encode(), "application/x-www-form-urlencoded", **kw)

    def interaction(self, payload: dict[str, Any], **kw: Any) -> tuple[int, bytes, float]:
        body = ("payload=" + quote(json.dumps(payload))).encode()
        return self.post(body, "application/x-www-form-urlencoded", **kw)


@contextmanager
def serving(settings: Settings, fake: FakeSlack) -> Iterator[Endpoint]:
    """`inferbot serve --http`'s server for `settings`, on a free loopback port."""
    from bot.slack.app import EVENTS_PATH, build, http_server

    bot = build(settings, http=True)
    server = http_server(bot.app, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield Endpoint(f"http://127.0.0.1:{server.server_port}{EVENTS_PATH}", fake)
    finally:
        server.shutdown()
        server.server_close()
        bot.close()


@pytest.fixture
def endpoint(settings: Settings, fake: FakeSlack) -> Iterator[Endpoint]:
    with serving(settings, fake) as ep:
        yield ep
