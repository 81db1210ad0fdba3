"""`inferbot serve`'s logs: redacted whatever logger writes them, no payload bodies, JSON on
request."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from bot.config import Settings
from bot.logs import configure, describe_exception, flush

TOKEN = "xoxb-1234567890-abcdefghijkl"


class Written(io.StringIO):
    """The stream the log is written to; reading it first writes what is still queued."""

    def getvalue(self) -> str:
        flush()
        return super().getvalue()


@pytest.fixture
def logged() -> Iterator[Callable[..., io.StringIO]]:
    """configure(settings), writing into a buffer; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def start(settings: Settings, buffer: Written | None = None) -> io.StringIO:
        buffer = buffer or Written()
        configure(settings).setStream(buffer)
        return buffer

    yield start
    flush()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_every_logger_is_redacted_including_arguments_and_tracebacks(
        logged: Callable[[Settings], io.StringIO]) -> None:
    stream = logged(Settings(log_format="text", log_level="INFO"))
    logging.getLogger("slack_sdk.web").info("calling with %s", f"Bearer {TOKEN}")
    try:
        raise RuntimeError(f"postgresql://bot:hunter22@db/x refused {TOKEN}")
    except RuntimeError:
        logging.getLogger("inferbot.slack").exception("failed")
    out = stream.getvalue()
    assert TOKEN not in out and "hunter22" not in out
    assert "Bearer [REDACTED]" in out and "RuntimeError: postgresql://bot:[REDACTED]@db/x " \
        "refused [REDACTED]" in out


def test_json_lines_and_the_level(logged: Callable[[Settings], io.StringIO]) -> None:
    stream = logged(Settings(log_format="json", log_level="WARNING"))
    logging.getLogger("slack_sdk").setLevel(logging.INFO)  # as bot.slack.app holds it
    logging.getLogger("slack_sdk").info("below the configured level")
    logging.getLogger("inferbot.slack").warning("upload of %s failed: %s", "x.png", "ratelimited")
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "WARNING" and record["logger"] == "inferbot.slack"
    assert record["message"] == "upload of x.png failed: ratelimited" and record["ts"]


def test_sql_and_its_parameters_are_not_logged_even_at_debug(
        logged: Callable[[Settings], io.StringIO], tmp_path: Path) -> None:
    from sqlalchemy import create_engine, text

    """SQLAlchemy's statement log carries parameters (incident excerpts); it holds its own
    loggers at WARNING, and INFERBOT_LOG_LEVEL=DEBUG must not undo that."""
    stream = logged(Settings(log_level="DEBUG"))
    with create_engine(f"sqlite:///{tmp_path / 'x.db'}").connect() as conn:
        conn.execute(text("SELECT :excerpt"), {"excerpt": "pasted log line"})
    assert "pasted log line" not in stream.getvalue()


def test_bolts_request_bodies_are_withheld(logged: Callable[[Settings], io.StringIO]) -> None:
    stream = logged(Settings())
    body = {"type": "event_callback", "event": {"text": "HF paste with secrets"}}
    logging.getLogger("slack_bolt.App").warning(
        f"A global middleware (X) skipped calling either `next()` or `next_()` without "
        f"providing a response for the request ({body})")
    out = stream.getvalue()
    assert "HF paste" not in out and "for the request (body not logged)" in out


def test_a_thread_that_logs_does_not_wait_for_the_write(
        logged: Callable[..., io.StringIO]) -> None:
    """Under a burst the HTTP threads each log a line; a slow stderr (or one held by another
    thread's write) must not hold them, and the line still comes, redacted, in order."""

    class Stalled(Written):
        def __init__(self) -> None:
            super().__init__()
            self.go = threading.Event()

        def write(self, text: str) -> int:
            self.go.wait(10)
            return super().write(text)

    stream = Stalled()
    logged(Settings(log_format="json"), stream)
    start = time.monotonic()
    for i in range(3):
        logging.getLogger("inferbot.slack.http").info("request Ev%d (%d bytes) %s", i, 10, TOKEN)
    took = time.monotonic() - start
    stream.go.set()
    lines = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    assert took < 1, f"logging waited {took:.1f} s for the stream"
    assert lines == [f"request Ev{i} (10 bytes) [REDACTED]" for i in range(3)]


def test_a_validation_error_is_described_without_its_input() -> None:
    class Event(BaseModel):
        channel: str

    with pytest.raises(ValidationError) as caught:
        Event.model_validate({"channel": 5, "text": "the whole pasted log"})
    line = describe_exception(caught.value)
    assert line == "ValidationError: 1 error(s) at channel"
