"""Logging for `inferbot serve`: one line per record, text or JSON, and nothing secret in it.

Every record goes through `RedactFilter` on the handler (a handler filter sees records from
every logger, including slack_sdk's and Bolt's, which a logger filter would miss): the message,
its arguments and any traceback are rendered and passed through `bot.evidence.redact`, so a
token in an exception message or a URL with a password never reaches the log. Payload bodies
are not logged by inferbot's own code; Bolt's warnings that print a request body are cut to
their first words here, because they are Bolt's strings, not ours.

`INFERBOT_LOG_FORMAT=json` writes one JSON object per line (ts, level, logger, message, exc),
which log shippers parse without a grok pattern; `text` is for a terminal.

One thread writes (`QueueListener`): a thread that logs only renders its message and puts the
record on a queue. Redacting, formatting and writing to stderr happen on the writer, so no
thread waits for another's write: the HTTP endpoint logs a line per request, and under a
burst its threads queued on the stream's lock, each holder waiting for the GIL after its
write while the acks waited behind it.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import sys
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener
from typing import TextIO

from bot.config import Settings
from bot.errors import one_line
from bot.evidence.redact import redact

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Bolt warnings whose text embeds a request body (the marker, and where the body starts).
_BODY_MARKERS = (
    "without providing a response for the request (",
    "Unhandled request (",
    # slack_bolt's RequestVerification, at INFO, on every request that fails the signature
    ", body: ",
)
MAX_MESSAGE = 2000


def _withhold_bodies(message: str) -> str:
    for marker in _BODY_MARKERS:
        at = message.find(marker)
        if at >= 0:
            return message[: at + len(marker)] + "body not logged)"
    return message


class RedactFilter(logging.Filter):
    """Render each record once, redacted and bounded; later handlers see only that text."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = _withhold_bodies(record.getMessage())
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + " [cut]"
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self._formatter.formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


class _Enqueue(QueueHandler):
    """Hands each record to the writer thread."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        # The message is rendered now, while its arguments are as they were when logged; a
        # traceback is left to the writer, whose RedactFilter renders and redacts it.
        record.msg, record.args = record.getMessage(), None
        return record

    def handle(self, record: logging.LogRecord) -> bool:
        # Without the handler's lock: putting on a SimpleQueue is already thread-safe, and a
        # lock every logging thread takes is what this handler is here to avoid.
        if not self.filter(record):
            return False
        self.emit(record)
        return True


_writer: QueueListener | None = None


def configure(settings: Settings) -> logging.StreamHandler[TextIO]:
    """Route every logger to one redacting stderr handler in the configured format and level,
    written by one thread (module docstring); the handler is returned.

    Replaces the root logger's handlers, so calling it twice does not log twice.
    """
    global _writer
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactFilter())
    handler.setFormatter(JsonFormatter() if settings.log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    # The handler's level too: slack_sdk and Bolt are held at INFO (bot.slack.app), and a
    # logger's own level lets its records past the root's.
    handler.setLevel(settings.log_level)
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    if _writer is None:
        atexit.register(_stop)  # what is still queued at exit is written
    else:
        _writer.stop()  # the previous configuration's records first
    _writer = QueueListener(records, handler, respect_handler_level=True)
    _writer.start()
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(records)]
    root.setLevel(settings.log_level)
    return handler


def _stop() -> None:
    if _writer is not None:
        _writer.stop()  # writes what is queued, then ends the thread


def flush() -> None:
    """Write every record logged so far (for a reader of the stream, such as a test); later
    records are written as before."""
    _stop()
    if _writer is not None:
        _writer.start()


def describe_exception(exc: BaseException) -> str:
    """An exception as one log-safe line: its type, then its redacted, bounded first line."""
    return one_line(exc, typed=True)
