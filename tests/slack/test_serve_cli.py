"""`inferbot serve --http` as a real process: wiring, settings from the environment, exit codes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.slack import ROOT, Endpoint, serve_env, serve_process
from tests.slack.fakes import BOT_TOKEN, FakeSlack, load

pytestmark = pytest.mark.slack


@pytest.fixture
def served(fake: FakeSlack, tmp_path: Path) -> Iterator[tuple[Endpoint, subprocess.Popen[str]]]:
    with serve_process(serve_env(fake, tmp_path), fake) as running:
        yield running


@pytest.mark.slow
def test_serve_http_verifies_signatures(served: tuple[Endpoint, subprocess.Popen[str]],
                                        fake: FakeSlack) -> None:
    endpoint, _ = served
    assert endpoint.event(load("url_verification.json"))[0] == 200
    assert endpoint.event(load("url_verification.json"), secret="wrong")[0] == 401
    assert fake.recorder.of("auth.test")[0].auth == f"Bearer {BOT_TOKEN}"


@pytest.mark.slow
def test_serve_http_without_the_signing_secret_is_a_usage_error(fake: FakeSlack,
                                                                tmp_path: Path) -> None:
    e = serve_env(fake, tmp_path)
    del e["SLACK_SIGNING_SECRET"]
    done = subprocess.run([sys.executable, "-m", "bot.cli", "serve", "--http", "--port", "0"],
                          cwd=ROOT, env=e, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "inferbot: not set: SLACK_SIGNING_SECRET (HTTP mode needs SLACK_BOT_TOKEN and "
        'SLACK_SIGNING_SECRET); the README\'s section "Slack", "Create the app", says where '
        "each value is")
    assert not fake.recorder.of("auth.test")  # refused before Slack was contacted


@pytest.mark.slow
def test_serve_when_slack_cannot_be_reached_fails_in_one_line(fake: FakeSlack,
                                                              tmp_path: Path) -> None:
    e = serve_env(fake, tmp_path, INFERBOT_SLACK_API_URL="http://127.0.0.1:9/api/")
    done = subprocess.run([sys.executable, "-m", "bot.cli", "serve", "--http", "--port", "0"],
                          cwd=ROOT, env=e, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "inferbot: cannot reach Slack with the bot token: [Errno 111] Connection refused")
    assert "Traceback" not in done.stderr
