"""Fixtures for the Slack tests: the fake Web API, Settings pointing at it, the real Bolt HTTP
endpoint on a loopback port, and signed requests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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
ROOT = Path(__file__).resolve().parents[2]


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
    server = http_server(bot, "127.0.0.1", 0)
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


def serve_env(fake: FakeSlack, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of an `inferbot serve` process: this one's, minus any SLACK_/INFERBOT_
    variable, plus tokens and URLs for the fake and an SQLite file under `tmp_path`."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "INFERBOT_"))}
    base.update(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET,
                INFERBOT_SLACK_API_URL=fake.api_url,
                INFERBOT_DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite'}")
    base.update(extra)
    return base


@contextmanager
def serve_process(env: dict[str, str], fake: FakeSlack
                  ) -> Iterator[tuple[Endpoint, subprocess.Popen[str]]]:
    """`inferbot serve --http --port 0` as a real process; its endpoint once it listens.
    Terminated (SIGTERM, the way an orchestrator stops it) on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--http", "--bind", "127.0.0.1",
         "--port", "0"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        port = None
        assert proc.stderr is not None
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)/slack/events", line)
            port = int(found.group(1)) if found else None
        assert port, "inferbot serve did not report its port"
        yield Endpoint(f"http://127.0.0.1:{port}/slack/events", fake), proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
