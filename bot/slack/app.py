"""The Bolt app: listeners that acknowledge, parse, delegate and reply, and the two transports.

Listeners stay thin (Bolt's pattern): the 200 goes out first (events are acknowledged by Bolt
before the listener runs; commands, clicks and views call `ack()` first thing), the payload is
parsed into a pydantic model, and the work is handed to a handler (`bot.slack.handlers`) on a
bounded thread pool. Only opening a modal happens in the listener itself, because a
`trigger_id` expires in 3 s.

Logging: event kinds and ids only. Payload bodies never reach a log: slack_sdk's and Bolt's
DEBUG output (which includes request bodies) is held at INFO, exceptions are logged as their
type and a redacted first line (`bot.logs.describe_exception`), and `inferbot serve` passes
every record through the redacting handler of `bot.logs`.

Metrics (`bot.metrics`, GET /metrics in HTTP mode): diagnoses by problem, reply latency,
Slack API errors (counted in the Web API client itself, whatever called it), dedup hits.
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.error import URLError

from pydantic import ValidationError
from slack_bolt import Ack, App, BoltContext, Respond, Say
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.error import BoltError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.web import SlackResponse

from bot import flows, metrics
from bot.config import Settings
from bot.errors import one_line
from bot.flows import Asker
from bot.logs import configure as configure_logging
from bot.logs import describe_exception
from bot.logs import flush as flush_logs
from bot.slack import blocks
from bot.slack.authz import Authorizer
from bot.slack.dedup import Dedup
from bot.slack.handlers import BUSY, Handlers
from bot.slack.http import Gate, HttpServer, never_raises
from bot.slack.outbound import Outbound
from bot.slack.parse import HOST_RE, parse
from bot.slack.payloads import ActionBody, CommandBody, FeedbackMeta, HomeEvent, MessageEvent
from bot.store import database_problem
from bot.structs import struct

if TYPE_CHECKING:
    from bot.kb.loader import KB

log = logging.getLogger("inferbot.slack")

SLASH_COMMAND = "/inferbot"
EVENTS_PATH = "/slack/events"
RATE_LIMIT_RETRIES = 3
_INCIDENT_VALUE = re.compile(r"^\d{1,18}$")
# Message subtypes that carry something the user wrote (edits, joins and deletions do not).
_USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


# --------------------------------------------------------------------------- the work

class Pool:
    """The bounded pool behind the 3-second ack: `workers` threads and at most `queue` tasks
    waiting; `submit` says False past that (the caller tells the user to retry) instead of
    letting a burst grow memory and delay every answer. Tasks with the same `key` (a channel)
    run one after another in the order submitted, so a channel's answers come in order; other
    keys run alongside. A task that fails is logged (its type and a redacted first line, never
    a payload) and the pool goes on."""

    def __init__(self, workers: int, queue: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="inferbot-slack")
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._chains: dict[str, deque[tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., None], *args: Any, key: str | None = None) -> bool:
        if not self._slots.acquire(blocking=False):
            log.warning("work queue full: %s refused", fn.__name__)
            return False
        if key is not None:
            with self._lock:
                chain = self._chains.get(key)
                if chain is not None:  # the key's chain is running: it takes this one next
                    chain.append((fn, args))
                    return True
                self._chains[key] = deque()
            if not self._start(fn, self._chain, key, fn, args):
                with self._lock:
                    del self._chains[key]
                return False
            return True
        return self._start(fn, self._guard, fn, *args)

    def _start(self, fn: Callable[..., None], run: Callable[..., None], *args: Any) -> bool:
        """Hand `run(*args)` to a worker; False once the pool is shutting down (SIGTERM: the
        answers in flight finish, and a follow-up they queue, such as a chart, is dropped)."""
        try:
            self.executor.submit(run, *args)
        except RuntimeError:  # cannot schedule new futures after shutdown
            self._slots.release()
            log.info("shutting down: %s not started", fn.__name__)
            return False
        return True

    def later(self, fn: Callable[..., None], *args: Any) -> bool:
        """A follow-up (a chart, a store lookup) off its channel's turn: refused, and logged,
        when the queue is full (False)."""
        return self.submit(fn, *args)

    def _chain(self, key: str, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        while True:
            self._guard(fn, *args)
            with self._lock:
                chain = self._chains[key]
                if not chain:
                    del self._chains[key]
                    return
                fn, args = chain.popleft()

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the last line of defence: log the type, never a payload
            log.error("%s failed: %s", fn.__name__, describe_exception(exc))
        finally:
            self._slots.release()


class Debounce:
    """`due(key)`: True at most once per `seconds` per key (App Home opens come in bursts as
    a user clicks between tabs; each render costs a views.publish and a store query)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, key: str) -> bool:
        with self._lock:
            now = time.monotonic()
            if now - self._last.get(key, -math.inf) < self.seconds:
                return False
            self._last[key] = now
            if len(self._last) > 10_000:
                self._last = {k: t for k, t in self._last.items() if now - t < self.seconds}
            return True


# --------------------------------------------------------------------------- the app

class _CountingClient(WebClient):
    """A WebClient that counts failed calls (after its own retries) in
    inferbot_slack_api_errors_total: one place sees every call the worker makes."""

    def api_call(self, api_method: str, **kwargs: Any) -> SlackResponse:
        try:
            return super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            metrics.SLACK_API_ERRORS.inc(api_method, str(exc.response.get("error") or "http"))
            raise
        except (URLError, OSError):
            metrics.SLACK_API_ERRORS.inc(api_method, "connection")
            raise


def web_client(settings: Settings) -> WebClient:
    """The Web API client: bot token, optional base URL, and retries on 429 (Retry-After)
    and on dropped connections."""
    kwargs: dict[str, Any] = {}
    if settings.slack_api_url:
        kwargs["base_url"] = settings.slack_api_url
    return _CountingClient(
        token=settings.bot_token.get_secret_value() if settings.bot_token else None,
        retry_handlers=[ConnectionErrorRetryHandler(),
                        RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES)],
        **kwargs,
    )


class StartupError(RuntimeError):
    """Slack cannot be reached or refuses the token at start-up (one line for the user)."""


def quiet_library_logs() -> None:
    """slack_sdk and Bolt log request and response bodies (message content, pastes) at DEBUG:
    their loggers are held at INFO whatever the root level is. waitress warns "Task queue
    depth is N" for every request that finds its threads busy, which in a burst is every
    request, from its one I/O thread and under the lock its request threads take work with:
    held at ERROR, the burst's acks do not wait for that line."""
    for name in ("slack_sdk", "slack_bolt", "inferbot.slack.bolt"):
        logging.getLogger(name).setLevel(logging.INFO)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)


@struct
class SlackBot:
    """The Bolt app, its handlers and the pool doing their work; `close()` finishes the work
    in flight."""

    app: App
    handlers: Handlers
    pool: Pool

    def close(self) -> None:
        self.pool.executor.shutdown(wait=True)


def missing_tokens(settings: Settings, *, http: bool) -> list[str]:
    """The variables `inferbot serve` needs in this mode and does not have: the bot token
    always, the app-level token for Socket Mode, the signing secret for HTTP mode."""
    mode = ("SLACK_SIGNING_SECRET", settings.signing_secret) if http else \
        ("SLACK_APP_TOKEN", settings.app_token)
    return [name for name, value in [("SLACK_BOT_TOKEN", settings.bot_token), mode]
            if value is None]


def require_tokens(settings: Settings, *, http: bool) -> None:
    """Every missing variable in one line, before Slack is contacted, with where to find the
    values (ValueError: the CLI's exit 2)."""
    missing = missing_tokens(settings, http=http)
    if not missing:
        return
    mode = ("HTTP mode needs SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET" if http else
            "Socket Mode needs SLACK_BOT_TOKEN and SLACK_APP_TOKEN; `serve --http` needs "
            "SLACK_SIGNING_SECRET instead of the app token")
    raise ValueError(f"not set: {', '.join(missing)} ({mode}); the README's section "
                     '"Slack", "Create the app", says where each value is')


def build(settings: Settings, *, http: bool) -> SlackBot:
    """The Bolt app with every listener, once the mode's tokens are all there. HTTP mode
    verifies signatures; Socket Mode needs no secret but the app-level token."""
    require_tokens(settings, http=http)
    assert settings.bot_token is not None  # require_tokens said so
    quiet_library_logs()
    client = web_client(settings)
    try:  # Bolt checks the token with auth.test here
        app = App(client=client, name="inferbot",
                  logger=logging.getLogger("inferbot.slack.bolt"),
                  signing_secret=settings.signing_secret.get_secret_value()
                  if settings.signing_secret else None,
                  request_verification_enabled=http)
    except (BoltError, SlackApiError, URLError, OSError) as exc:
        raise StartupError(f"cannot reach Slack with the bot token: {one_line(exc)}") from None
    pool = Pool(settings.workers, settings.work_queue)
    handlers = Handlers(settings=settings, out=Outbound(client, settings.slack_channel_interval_s),
                        authz=Authorizer(settings, client), dedup=Dedup(settings),
                        kb=_kb, later=pool.later)
    register(app, handlers, pool.submit)
    return SlackBot(app, handlers, pool)


@lru_cache(maxsize=1)
def _kb() -> KB:
    """The KB this process answers with, loaded once."""
    from bot.kb.loader import load_kb

    return load_kb()


def register(app: App, h: Handlers, submit: Callable[..., bool]) -> None:
    """Every listener: acknowledge, parse the payload, hand the work to a handler."""

    @app.error
    def on_error(error: Exception) -> None:
        log.error("listener error: %s", describe_exception(error))

    @app.event("app_mention")
    def on_mention(event: dict[str, Any], context: BoltContext, say: Say) -> None:
        msg = MessageEvent.model_validate(event)
        if not submit(h.message, msg, context.bot_user_id, time.monotonic(), key=msg.channel):
            say(text=BUSY, thread_ts=msg.thread)

    @app.event("message")
    def on_message(event: dict[str, Any], context: BoltContext, say: Say) -> None:
        msg = MessageEvent.model_validate(event)
        bot = context.bot_user_id
        mentioned = bool(bot) and f"<@{bot}>" in msg.text
        if msg.bot_id or not msg.user or msg.subtype not in _USER_SUBTYPES:
            return
        if (mentioned or msg.channel_type == "im") and \
                not submit(h.message, msg, bot, time.monotonic(), key=msg.channel):
            say(text=BUSY, thread_ts=msg.thread)

    @app.command(SLASH_COMMAND)
    def on_command(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        body = CommandBody.model_validate(command)
        req = parse(body.text)
        if req.verb in ("paste", "check"):
            ack(text="Looking…")
        else:
            ack()
        if not submit(h.slash, body, req, respond):
            respond(text=BUSY)

    @app.action(blocks.ACTION_COLLECT)
    def on_collect(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = ActionBody.model_validate(body)
        channel = click.channel.id if click.channel else ""
        if not HOST_RE.match(click.value) or not click.thread:
            log.warning("collect_host: malformed click refused")
            return
        submit(h.collect, Asker(origin="slack", user=click.user.id, channel=channel,
                                thread=click.thread), click.value)

    def acting(handle: Callable[[ActionBody], None]) -> Callable[[Ack, dict[str, Any]], None]:
        """A button or menu: acknowledge, parse the action, hand it to its handler."""

        def listener(ack: Ack, body: dict[str, Any]) -> None:
            ack()
            submit(handle, ActionBody.model_validate(body))

        return listener

    for action, handle in ((blocks.ACTION_FIXED, h.fixed), (blocks.ACTION_DETAILS, h.details),
                           (blocks.ACTION_FIX_FAILED, h.fix_failed),
                           (blocks.ACTION_SIZE_PICK, h.size_pick)):
        app.action(action)(acting(handle))

    @app.action(blocks.ACTION_SHOW)
    def on_show(ack: Ack) -> None:
        ack()  # a link: Slack opens it, nothing to do here

    @app.action(blocks.ACTION_WRONG)
    def on_wrong(ack: Ack, body: dict[str, Any], client: WebClient) -> None:
        ack()
        click = ActionBody.model_validate(body)
        channel = click.channel.id if click.channel else ""
        if not _INCIDENT_VALUE.match(click.value) or not click.thread or not click.trigger_id:
            log.warning("wrong_diagnosis: malformed click refused")
            return
        client.views_open(trigger_id=click.trigger_id,
                          view=blocks.feedback_modal(int(click.value), channel, click.thread))

    @app.view(blocks.VIEW_WRONG)
    def on_wrong_note(ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        try:
            meta = FeedbackMeta.model_validate_json(view.get("private_metadata") or "")
            note = str(view["state"]["values"][blocks.NOTE_BLOCK][blocks.NOTE_INPUT]["value"]
                       or "")[:3000]
        except (ValidationError, KeyError, TypeError):
            ack(response_action="errors", errors={blocks.NOTE_BLOCK: "Could not read the form."})
            return
        ack()
        submit(h.wrong, meta, note, str(body["user"]["id"]))

    home_due = Debounce(h.settings.home_debounce_s)

    @app.event("app_home_opened")
    def on_home(event: dict[str, Any]) -> None:
        home = HomeEvent.model_validate(event)
        if home.tab == "home" and home_due.due(home.user):
            submit(h.home, home.user)


# --------------------------------------------------------------------------- transports

class Health:
    """/healthz's answer: the process is up (always 200, so a load balancer keeps a replica
    that can still answer), and whether the database is reachable ("degraded" when not: answers
    go on, incidents wait in the spool). The database is probed at most every PROBE_EVERY_S
    seconds, however often the balancers ask, and one probe at a time."""

    PROBE_EVERY_S = 10.0

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._checked = -math.inf
        self._problem: str | None = None

    def report(self) -> dict[str, str]:
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.PROBE_EVERY_S:
                self._problem = database_problem(self.settings.database_url,
                                                 self.settings.db_deadline_s)
                self._checked = time.monotonic()
            problem = self._problem
        if problem is None:
            return {"status": "ok", "database": "ok"}
        return {"status": "degraded", "database": f"unavailable: {problem}"}


def wsgi_app(bot: SlackBot) -> Callable[..., Iterable[bytes]]:
    """Slack's endpoint at /slack/events (events, commands, interactivity); /healthz for load
    balancers; /metrics for Prometheus (this process's own figures)."""
    settings = bot.handlers.settings
    slack = Gate(settings)(SlackRequestHandler(bot.app))
    health = Health(settings)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]
                    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == "/healthz":
            body = json.dumps(health.report()).encode() + b"\n"
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        if path == "/metrics":
            body = metrics.exposition().encode()
            start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE),
                                      ("Content-Length", str(len(body)))])
            return [body]
        if path == EVENTS_PATH and environ.get("REQUEST_METHOD") == "POST":
            return slack(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain"),
                                         ("Content-Length", "10")])
        return [b"not found\n"]

    return never_raises(application)


def http_server(bot: SlackBot, host: str, port: int) -> HttpServer:
    """The bounded HTTP server for the bot (bot.slack.http); `serve_forever()` runs it."""
    return HttpServer(wsgi_app(bot), bot.handlers.settings, host, port)


def socket_mode(app: App, settings: Settings) -> Any:
    """The Socket Mode handler (call `.start()` to block, `.connect()` to run in background)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    require_tokens(settings, http=False)
    assert settings.app_token is not None  # require_tokens said so
    return SocketModeHandler(app, app_token=settings.app_token.get_secret_value())


def prepare(settings: Settings) -> None:
    """What `serve` does before it takes requests: the store migrated if it is behind (the
    answer path never migrates: under its deadline a migration would be cut off). A store
    that is down, or still migrating past the deadline, is one warning: answers go on."""
    try:
        flows.prepare_store(settings)
    except flows.StoreDown as exc:
        log.warning("incident store not ready (%s): answers go on, incidents are spooled "
                    "until it is", exc)


def run(settings: Settings, *, http: bool, bind: str, port: int) -> None:
    """`inferbot serve`: Socket Mode (blocks on the WebSocket) or the HTTP endpoint. SIGTERM
    stops taking requests and finishes the answers in flight."""
    configure_logging(settings)
    try:
        bot = build(settings, http=http)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            prepare(settings)
            if http:
                server = http_server(bot, bind, port)
                log.info("listening on http://%s:%d%s", bind, server.server_port, EVENTS_PATH)
                server.serve_forever()
            else:
                log.info("connecting in Socket Mode")
                socket_mode(bot.app, settings).start()
        finally:
            bot.close()
    finally:
        flush_logs()  # what was logged is on stderr before the command's own last line
