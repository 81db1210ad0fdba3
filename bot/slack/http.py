"""The HTTP transport of `inferbot serve --http`: a bounded server and the gate before Bolt.

The endpoint faces the internet (behind a TLS proxy), so nothing an unsigned client sends may
cost more than a small, fixed amount:

- waitress reads requests on one I/O thread and hands only complete ones to a fixed pool of
  `http_threads` workers; a half-sent request holds a socket, never a thread. Connections are
  capped at `http_max_connections`.
- A body over `http_max_body_bytes` (1 MB: Slack's events are small; large pastes arrive as
  files) is answered 413 from its Content-Length before any of it is read, and a chunked body
  is cut when its count passes the limit.
- A connection that sends nothing for `http_idle_timeout_s`, or has not finished its request
  `http_request_timeout_s` after it began, is closed (checked every second).
- `Gate` then checks, before Bolt parses anything: a numeric timestamp (else 400), the
  signature (else 401), a body of the content type's form (else 400). Each answer is one line;
  the log says the reason, the size and the event id, never the body.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

from bot.config import Settings
from bot.logs import describe_exception
from bot.structs import struct

log = logging.getLogger("inferbot.slack.http")

# How often open connections are checked against the idle and request deadlines.
_SWEEP_S = 1
_POLL_S = 0.2

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@struct(frozen=True)
class Refusal:
    status: str  # "400 Bad Request"
    reason: str  # one line, said to the client and logged


def _answer(start_response: StartResponse, refusal: Refusal) -> list[bytes]:
    body = refusal.reason.encode() + b"\n"
    start_response(refusal.status, [("Content-Type", "text/plain; charset=utf-8"),
                                    ("Content-Length", str(len(body)))])
    return [body]


class Gate:
    """The checks every POST to the events path passes before Bolt sees it."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
        self._verifier = SignatureVerifier(secret)
        self._max_body = settings.http_max_body_bytes

    def __call__(self, app: WsgiApp) -> WsgiApp:
        def gated(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            body, refusal = self._read(environ)
            if refusal is None:
                refusal = self._check(environ, body)
            if refusal is not None:
                log.info("refused request: %s (%d bytes)", refusal.reason, len(body))
                return _answer(start_response, refusal)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            return app(environ, start_response)

        return gated

    def _read(self, environ: dict[str, Any]) -> tuple[bytes, Refusal | None]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return b"", Refusal("400 Bad Request", "Content-Length is not a number")
        if length > self._max_body:  # waitress refuses these first; a direct caller may not
            return b"", Refusal("413 Request Entity Too Large",
                                f"request body over {self._max_body} bytes")
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        return body, None

    def _check(self, environ: dict[str, Any], body: bytes) -> Refusal | None:
        stamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")
        signature = environ.get("HTTP_X_SLACK_SIGNATURE", "")
        if not stamp.isdigit() or len(stamp) > 12:
            return Refusal("400 Bad Request",
                           "X-Slack-Request-Timestamp is not a number")
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return Refusal("400 Bad Request", "body is not UTF-8")
        if not signature or not self._verifier.is_valid(body, stamp, signature):
            return Refusal("401 Unauthorized", "invalid or stale request signature")
        try:
            event_id = _parse(environ.get("CONTENT_TYPE", ""), body)
        except ValueError as exc:
            return Refusal("400 Bad Request", str(exc))
        log.info("request %s (%d bytes)", event_id or "-", len(body))
        return None


def _parse(content_type: str, body: bytes) -> str | None:
    """The payload's event id (or None), after checking the body has the form its content type
    says. ValueError: one line on what is wrong."""
    kind = content_type.split(";", 1)[0].strip().lower()
    try:
        text = body.decode("utf-8")
        if kind == "application/json":
            data = json.loads(text)
        elif kind == "application/x-www-form-urlencoded":
            form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text),
                            max_num_fields=200)
            payload = form.get("payload")
            data = json.loads(payload[0]) if payload else {}
        else:
            raise ValueError(f"unsupported content type {kind or '(none)'}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"body is not valid {'JSON' if kind.endswith('json') else 'form data'}"
                         f" ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError("body is not a JSON object")
    event_id = data.get("event_id")
    return event_id if isinstance(event_id, str) and event_id.isalnum() else None


def never_raises(app: WsgiApp) -> WsgiApp:
    """A failure inside Bolt or a listener becomes a one-line log and a 500 with one line,
    never a traceback on stderr."""

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            return list(app(environ, start_response))
        except Exception as exc:
            log.error("request failed: %s", describe_exception(exc))
            return _answer(start_response, Refusal("500 Internal Server Error",
                                                    "internal error (logged)"))

    return guarded


class _Server(TcpWSGIServer):
    """waitress's server, whose sweep also closes connections whose request is not complete
    `request_timeout_s` after the sweep first saw it begun (a client that trickles bytes
    stays clear of the idle timeout, not of this one)."""

    request_timeout_s: float = 10.0
    # (channel, its request in progress) -> when the sweep first saw that request
    _partial: dict[tuple[int, int], float] = {}  # noqa: RUF012 - replaced, never mutated

    def maintenance(self, now: int) -> None:  # waitress passes time.time(), a float
        super().maintenance(now)
        seen = self._partial
        current: dict[tuple[int, int], float] = {}
        # (the stubs type active_channels as one channel; it is waitress's map of them)
        channels = cast("dict[int, HTTPChannel]", self.active_channels)
        for channel in list(channels.values()):
            if channel.request is None or channel.requests:
                continue
            key = (id(channel), id(channel.request))
            current[key] = started = seen.get(key, now)
            if now - started >= self.request_timeout_s:
                channel.will_close = True
        self._partial = current


class HttpServer:
    """The server for one WSGI app, with socketserver's method names (the tests and `run`
    start it in a thread and stop it from another)."""

    def __init__(self, app: WsgiApp, settings: Settings, host: str, port: int) -> None:
        self._map: dict[int, Any] = {}
        self._server = _Server(
            app, self._map, host=host, port=port, threads=settings.http_threads,
            connection_limit=settings.http_max_connections,
            max_request_body_size=settings.http_max_body_bytes,
            channel_timeout=max(1, settings.http_idle_timeout_s - _SWEEP_S),
            cleanup_interval=_SWEEP_S, asyncore_use_poll=True, asyncore_loop_timeout=1,
            backlog=1024, ident="inferbot", expose_tracebacks=False)
        self._server.request_timeout_s = settings.http_request_timeout_s
        self._stop = threading.Event()
        self._stopped = threading.Event()

    @property
    def server_port(self) -> int:
        sock = self._server.socket
        assert sock is not None  # bound in the constructor
        return int(sock.getsockname()[1])

    def serve_forever(self) -> None:
        from waitress import wasyncore

        try:
            while not self._stop.is_set():
                wasyncore.loop(timeout=_POLL_S, map=self._map, use_poll=True, count=1)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop accepting and return once the loop has ended."""
        self._stop.set()
        self._server.pull_trigger()
        self._stopped.wait(timeout=10)

    def server_close(self) -> None:
        """Close every socket, once the workers have finished the requests they hold."""
        from waitress import wasyncore

        self._server.task_dispatcher.shutdown(cancel_pending=False, timeout=10)
        wasyncore.close_all(self._map)
