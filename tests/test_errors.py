"""Every error a person or a log sees is one line, redacted and bounded, whatever raised it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError
from slack_sdk.errors import SlackApiError
from sqlalchemy.exc import OperationalError

from bot.errors import MAX_CHARS, one_line

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-pa55"


def test_first_line_redacted_and_bounded() -> None:
    exc = RuntimeError(f"connect to postgresql://bot:{SECRET}@db:5432/x failed\nTraceback...")
    line = one_line(exc)
    assert SECRET not in line and "Traceback" not in line and "\n" not in line
    assert line.startswith("connect to postgresql://")
    assert len(one_line(RuntimeError("x" * 5000))) == MAX_CHARS


def test_a_wrapper_tells_what_it_wraps() -> None:
    inner = ConnectionRefusedError(f"password={SECRET} refused")
    wrapped = OperationalError("SELECT 1", {}, inner)
    assert one_line(wrapped, typed=True) == "ConnectionRefusedError: password=[REDACTED] refused"


def test_a_validation_error_never_echoes_its_input() -> None:
    class Event(BaseModel):
        channel: int

    with pytest.raises(ValidationError) as caught:
        Event.model_validate({"channel": f"token xoxb-{SECRET}"})
    line = one_line(caught.value)
    assert line == "1 error(s) at channel" and SECRET not in line


def test_a_web_api_error_is_its_code() -> None:
    exc = SlackApiError(  # type: ignore[no-untyped-call]
        "The request to the Slack API failed.", {"ok": False, "error": "invalid_auth"})
    assert one_line(exc) == "invalid_auth"


@pytest.mark.slow
def test_the_cli_says_a_database_outage_without_its_password(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
           "INFERBOT_DATABASE_URL": f"postgresql://bot:{SECRET}@127.0.0.1:9/none"}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "history"], env=env,
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 1
    assert SECRET.encode() not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
