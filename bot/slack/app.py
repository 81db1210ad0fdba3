"""The Bolt app: listeners that acknowledge, parse, delegate and reply, and the two transports.

Listeners stay thin (Bolt's pattern): the 200 goes out first (events are acknowledged by Bolt
before the listener runs; commands, clicks and views call `ack()` first thing), the payload is
parsed into a pydantic model, and the work is handed to `Worker` on a bounded thread pool. Only
opening a modal happens in the listener itself, because a `trigger_id` expires in 3 s.

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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from urllib.error import URLError
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from pydantic import ValidationError
from slack_bolt import Ack, App, BoltContext, Respond
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.error import BoltError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.web import SlackResponse

from bot import metrics
from bot.config import Settings
from bot.errors import one_line
from bot.logs import configure as configure_logging
from bot.logs import describe_exception
from bot.render.text import numbers
from bot.schema import Diagnosis
from bot.slack import backend, blocks
from bot.slack.authz import Authorizer
from bot.slack.blocks import Reply
from bot.slack.dedup import Dedup, message_key
from bot.slack.files import download_all
from bot.slack.parse import (
    HOST_RE,
    ParseError,
    Request,
    history_query,
    host_arg,
    parse,
    size_query,
)
from bot.slack.payloads import ActionBody, CommandBody, FeedbackMeta, HomeEvent, MessageEvent

log = logging.getLogger("inferbot.slack")

SLASH_COMMAND = "/inferbot"
EVENTS_PATH = "/slack/events"
RATE_LIMIT_RETRIES = 3
_FIX_VALUE = re.compile(r"^(\d{1,18}):([a-z0-9][a-z0-9_.:-]{0,99})$")
_INCIDENT_VALUE = re.compile(r"^\d{1,18}$")
# Message subtypes that carry something the user wrote (edits, joins and deletions do not).
_USER_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


# --------------------------------------------------------------------------- the work

def _count(d: Diagnosis) -> None:
    """One answered diagnosis, by its top problem: what the fleet keeps hitting."""
    metrics.DIAGNOSES.inc(d.problems[0].id if d.problems else "none")


def _collectable(d: Diagnosis) -> str | None:
    """The host a "Collect from HOST" button may name (an inventory-shaped name only)."""
    return d.host if d.host and HOST_RE.match(d.host) else None


class Worker:
    """Everything that happens after the ack, on a bounded pool."""

    def __init__(self, settings: Settings, client: WebClient) -> None:
        self.settings = settings
        self.client = client
        self.authz = Authorizer(settings, client)
        self.dedup = Dedup(settings)
        self.pool = ThreadPoolExecutor(max_workers=settings.workers,
                                       thread_name_prefix="inferbot-slack")
        token = settings.bot_token.get_secret_value() if settings.bot_token else ""
        self._token = token

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self.pool.submit(self._guard, fn, *args)

    @staticmethod
    def _guard(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the last line of defence: log the type, never a payload
            log.error("%s failed: %s", fn.__name__, describe_exception(exc))

    # ----- posting

    def post(self, channel: str, thread: str, reply: Reply) -> str:
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread, text=reply.text,
                                            blocks=reply.blocks, unfurl_links=False,
                                            unfurl_media=False)
        self._attach(channel, thread, reply)
        return str(resp["ts"])

    def update(self, channel: str, ts: str, thread: str, reply: Reply) -> None:
        self.client.chat_update(channel=channel, ts=ts, text=reply.text, blocks=reply.blocks)
        self._attach(channel, thread, reply)

    def _attach(self, channel: str, thread: str, reply: Reply) -> None:
        if reply.attachment:
            self.upload(channel, thread, reply.attachment.encode(), reply.attachment_name,
                        "The full answer")

    def upload(self, channel: str, thread: str, content: bytes, filename: str,
               title: str) -> None:
        """files.getUploadURLExternal -> POST the bytes -> files.completeUploadExternal
        (channel_id + thread_ts), which is what files_upload_v2 does."""
        try:
            self.client.files_upload_v2(channel=channel, thread_ts=thread, content=content,
                                        filename=filename, title=title)
        except SlackApiError as exc:
            log.warning("upload of %s failed: %s", filename, exc.response.get("error"))

    def ephemeral(self, channel: str, user: str, thread: str | None, text: str) -> None:
        self.client.chat_postEphemeral(channel=channel, user=user, text=text,
                                       thread_ts=thread)

    # ----- messages (mentions, DMs)

    def on_message(self, msg: MessageEvent, bot_user_id: str | None,
                   received: float | None = None) -> None:
        """Answer one message (once across replicas); `received` (time.monotonic() when the
        request arrived) starts the reply-latency clock, so queueing behind a burst counts."""
        started = received if received is not None else time.monotonic()
        if not self.dedup.claim(message_key(msg.channel, msg.ts)):
            log.info("duplicate delivery of %s/%s ignored", msg.channel, msg.ts)
            return
        req = parse(msg.text, bot_user_id, has_files=bool(msg.files))
        user = msg.user or ""
        if req.verb == "paste":
            self.paste(msg, req, user)
        elif req.verb == "check":
            self.check(msg.channel, msg.thread, user, req.args)
        else:
            self.post(msg.channel, msg.thread, self.quick(req, msg.channel, msg.thread, user))
            if req.verb == "size":
                self.submit(self.size_chart, req.args, msg.channel, msg.thread)
        metrics.REPLY_SECONDS.observe(time.monotonic() - started, req.verb)

    def quick(self, req: Request, channel: str, thread: str | None, user: str) -> Reply:
        """The verbs answered from the store, the KB or the calculators (no collection)."""
        try:
            if req.verb == "history":
                return self.history(req.args)
            if req.verb == "size":
                text = backend.size_text(backend.size(size_query(req.args)))
                return blocks.preformatted("*Sizing*", text, "sizing.txt")
            if req.verb == "resolve":
                return self.resolve(req.args, channel, thread, user)
            if req.verb == "kb":
                kb = backend.kb()
                log_entries = [(c.version, c.date, list(c.changes)) for c in kb.meta.changelog]
                return blocks.kb_reply(kb.version, kb.content_hash, log_entries)
        except backend.store_down_errors():
            return blocks.message("The incident store is unavailable right now; try again "
                                  "in a minute.")
        except ValueError as exc:  # ParseError, and the calculators' unknown model or GPU
            return blocks.message(blocks.esc(one_line(exc)))
        return blocks.help_reply()

    def paste(self, msg: MessageEvent, req: Request, user: str) -> None:
        looking = self.post(msg.channel, msg.thread, blocks.looking("the paste"))
        try:
            text, notes = self.gather(req.paste, msg.files)
            if not text.strip():
                reply = blocks.message("\n".join(blocks.esc(n) for n in notes) + "\n"
                                       + blocks.HELP)
                self.update(msg.channel, looking, msg.thread, reply)
                return
            d = backend.diagnose_text(text, host=None, channel=msg.channel,
                                      thread=msg.thread, user=user)
            self.answer(d, msg.channel, msg.thread, looking, user, notes)
        except Exception as exc:  # never leave "Looking…" standing
            self.update(msg.channel, looking, msg.thread, blocks.message(
                f"Sorry, that failed ({type(exc).__name__}); the error is in the bot's log."))
            raise

    def gather(self, paste: str, files: list[dict[str, Any]]) -> tuple[str, list[str]]:
        """The text to diagnose: the paste and each snippet, each bounded."""
        notes: list[str] = []
        limit = self.settings.max_paste_bytes
        data = paste.encode()
        if len(data) > limit:
            paste = data[:limit].decode(errors="ignore")
            notes.append(f"the paste was cut to its first {limit // 1024} KiB")
        parts = [paste] if paste.strip() else []
        if files:
            api = self.settings.slack_api_url
            for got in download_all(files, self.client, self._token,
                                    self.settings.max_file_bytes, api):
                if got.skipped:
                    notes.append(got.skipped)
                    continue
                parts.append(got.text)
                if got.truncated:
                    notes.append(f"{got.name}: only the first "
                                 f"{self.settings.max_file_bytes // 1024} KiB were read")
        return "\n".join(parts), notes

    def answer(self, d: Diagnosis, channel: str, thread: str, looking: str, user: str,
               notes: Iterable[str] = ()) -> None:
        """Record, then replace the "looking" message with the answer; the chart follows."""
        history_line, incident_id = self.remember(d, channel, thread, user)
        reply = blocks.answer(d, history_line=history_line, incident_id=incident_id,
                              host=d.host, can_collect_from=_collectable(d))
        _count(d)
        extra = [blocks.context(blocks.esc(n)) for n in notes]
        if extra and len(reply.blocks) + len(extra) <= blocks.MAX_BLOCKS:
            reply = reply.model_copy(update={"blocks": reply.blocks + extra})
        self.update(channel, looking, thread, reply)
        if d.problems and numbers(d):
            # Rendering takes a few hundred ms of CPU: queued behind the answers already
            # waiting, so a burst gets every text answer before the charts.
            self.submit(self.chart, d, channel, thread)

    def chart(self, d: Diagnosis, channel: str, thread: str) -> None:
        png = backend.chart_png(d)
        if png:
            self.upload(channel, thread, png, "memory-budget.png", "GPU memory budget")

    def size_chart(self, args: list[str], channel: str, thread: str) -> None:
        """The sizing's memory chart, after its text answer (a bad query was answered)."""
        try:
            report = backend.size(size_query(args))
        except ValueError:
            return
        png = backend.chart_png(report)
        if png:
            self.upload(channel, thread, png, "memory-budget.png", "GPU memory budget")

    def remember(self, d: Diagnosis, channel: str, thread: str, user: str
                 ) -> tuple[str | None, int | None]:
        """Store the incident; (the history line, the incident id). A database outage costs
        the history line and the buttons, never the answer (the event is spooled)."""
        try:
            result = backend.record(d, settings=self.settings, host=d.host, user=user,
                                    channel=channel, thread=thread)
        except Exception as exc:
            log.error("recording failed: %s", type(exc).__name__)
            return "History unavailable: the incident could not be recorded.", None
        if result.spooled:
            return ("History unavailable: the incident store is down; this incident is kept "
                    "and stored when it is back."), None
        return result.summary(), result.incident_id

    # ----- the slash command

    def slash(self, body: CommandBody, req: Request, respond: Respond) -> None:
        """`/inferbot ...` answers through response_url (slash commands have no thread):
        privately, except a diagnosis, which the channel sees."""
        channel, user = body.channel_id, body.user_id
        if req.verb not in ("paste", "check"):
            reply = self.quick(req, channel, None, user)
            respond(text=reply.text, blocks=reply.blocks, response_type="ephemeral")
            return
        try:
            if req.verb == "check":
                host = host_arg(req.args)
                if not self.authz.may_collect(user, channel):
                    respond(text=f"You may not collect from hosts. {self.authz.who_can()}",
                            response_type="ephemeral")
                    return
                d = backend.collect_and_diagnose(host, channel=channel, thread="", user=user)
            else:
                d = backend.diagnose_text(req.paste[:self.settings.max_paste_bytes], host=None,
                                          channel=channel, thread="", user=user)
        except Exception as exc:  # a refused or unreachable host, a bad word: say why
            respond(text=blocks.esc(one_line(exc)), response_type="ephemeral")
            return
        history_line, incident_id = self.remember(d, channel, "", user)
        reply = blocks.answer(d, history_line=history_line, incident_id=incident_id,
                              host=d.host, can_collect_from=_collectable(d))
        _count(d)
        respond(text=reply.text, blocks=reply.blocks, response_type="in_channel")

    # ----- collection

    def check(self, channel: str, thread: str, user: str, args: list[str]) -> None:
        try:
            host = host_arg(args)
        except ParseError as exc:
            self.post(channel, thread, blocks.message(blocks.esc(one_line(exc))))
            return
        self.collect(channel, thread, user, host)

    def collect(self, channel: str, thread: str, user: str, host: str) -> None:
        if not self.authz.may_collect(user, channel):
            self.ephemeral(channel, user, thread,
                           f"You may not collect from hosts. {self.authz.who_can()}")
            return
        looking = self.post(channel, thread, blocks.looking(host))
        try:
            d = backend.collect_and_diagnose(host, channel=channel, thread=thread, user=user)
        except Exception as exc:  # refused by the inventory, unreachable, timed out
            self.update(channel, looking, thread, blocks.message(
                f"Could not collect from `{blocks.esc(host)}`: "
                f"{blocks.esc(one_line(exc))}"))
            return
        self.answer(d, channel, thread, looking, user)

    # ----- store-backed verbs

    def history(self, args: list[str]) -> Reply:
        q = history_query(args)
        rows = backend.history(q, self.settings)
        described = ", ".join(f"{k} {v}" for k, v in q.model_dump(exclude_none=True).items())
        title = f"*History*{' (' + blocks.esc(described) + ')' if described else ''}"
        return blocks.history_reply(title, backend.format_history(rows))

    def resolve(self, args: list[str], channel: str, thread: str | None, user: str) -> Reply:
        """`resolve [INCIDENT] FIX`: the incident is the one given, else this thread's."""
        ref: int | str | None = None
        if args and re.fullmatch(r"(?:#?\d{1,18}|g\d{1,18})", args[0]):
            ref, args = args[0].lstrip("#"), args[1:]
        elif thread:
            ref = backend.thread_incident(self.settings, channel, thread)
        if ref is None:
            return blocks.message("Which incident? Say `resolve FIX` in the incident's thread, "
                                  "or `resolve INCIDENT FIX`.")
        fix = " ".join(args).strip() or "marked fixed"
        try:
            group = backend.resolve(ref, fix=backend.redact(fix), who=user,
                                    settings=self.settings)
        except (LookupError, ValueError) as exc:
            return blocks.message(blocks.esc(one_line(exc)))
        used = blocks.esc(group.resolution_fix or fix)
        return blocks.message(f"Resolved group g{group.group_id} (seen {group.count}x) "
                              f"with: `{used}`")

    def fixed(self, body: ActionBody) -> None:
        """"This fixed it": the value names incident and fix; the store supplies the fix's
        text, and the click must come from the incident's own channel."""
        channel = body.channel.id if body.channel else ""
        m = _FIX_VALUE.match(body.value)
        if m is None:
            log.warning("fix_worked: malformed value refused")
            return
        incident_id, fix_id = int(m.group(1)), m.group(2)
        try:
            origin = backend.incident_origin(incident_id, fix_id, self.settings)
            if origin is None or origin[0] != channel or origin[1] is None:
                self.ephemeral(channel, body.user.id, body.thread,
                               f"Incident {incident_id} in this channel has no fix {fix_id}.")
                return
            command = origin[1]
            group = backend.resolve(incident_id, fix=command, who=body.user.id,
                                    settings=self.settings)
        except backend.store_down_errors():
            self.ephemeral(channel, body.user.id, body.thread,
                           "The incident store is unavailable; try again in a minute.")
            return
        if body.thread:
            self.post(channel, body.thread, blocks.message(
                f"<@{body.user.id}> marked incident {incident_id} fixed by "
                f"`{blocks.esc(command)}` (group g{group.group_id}, seen {group.count}x)."))

    def wrong(self, meta: FeedbackMeta, note: str, user: str) -> None:
        """"Wrong diagnosis" submitted: stored as feedback on an incident of that channel."""
        try:
            origin = backend.incident_origin(meta.incident_id, None, self.settings)
            if origin is None or origin[0] != meta.channel:
                text = f"Incident {meta.incident_id} is not an incident of this channel."
            else:
                backend.feedback(meta.incident_id, note=backend.redact(note), who=user,
                                 settings=self.settings)
                text = f"Thanks: your note on incident {meta.incident_id} was recorded."
        except backend.store_down_errors():
            text = "The incident store is unavailable; your note was not recorded."
        self.ephemeral(meta.channel, user, meta.thread, text)

    # ----- App Home

    def home(self, user: str) -> None:
        recent: list[str] = []
        recurring: list[str] = []
        note = None
        try:
            rows = backend.recent(self.settings, limit=200)
        except backend.store_down_errors():
            rows, note = [], "The incident store is unavailable right now."
        for r in rows[:15]:
            when = r.created_at.strftime("%Y-%m-%d %H:%M")
            recent.append(f"`#{r.incident_id}` {when} · {blocks.esc(r.host or '-')} · "
                          f"{blocks.esc(r.problem_title or r.problem_id or 'no match')}"
                          f" · {r.status}")
        groups: dict[int, Any] = {}
        for r in rows:
            if r.count > 1:
                groups.setdefault(r.group_id, r)
        for r in sorted(groups.values(), key=lambda r: -r.count)[:10]:
            fixed = f", fixed by `{blocks.esc(r.resolution_fix)}`" if r.resolution_fix else ""
            recurring.append(f"`g{r.group_id}` {r.count}x · {blocks.esc(r.host or '-')} · "
                             f"{blocks.esc(r.problem_id or 'no match')}{fixed}")
        view = blocks.home_view(recent, recurring, backend.kb().version, note)
        self.client.views_publish(user_id=user, view=view)


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
    their loggers are held at INFO whatever the root level is."""
    for name in ("slack_sdk", "slack_bolt", "inferbot.slack.bolt"):
        logging.getLogger(name).setLevel(logging.INFO)


@dataclass
class SlackBot:
    """The Bolt app and the pool doing its work; `close()` finishes the work in flight."""

    app: App
    worker: Worker

    def close(self) -> None:
        self.worker.pool.shutdown(wait=True)


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
    worker = Worker(settings, client)
    register(app, worker)
    return SlackBot(app, worker)


def register(app: App, worker: Worker) -> None:
    @app.error
    def on_error(error: Exception) -> None:
        log.error("listener error: %s", describe_exception(error))

    @app.event("app_mention")
    def on_mention(event: dict[str, Any], context: BoltContext) -> None:
        msg = MessageEvent.model_validate(event)
        worker.submit(worker.on_message, msg, context.bot_user_id, time.monotonic())

    @app.event("message")
    def on_message(event: dict[str, Any], context: BoltContext) -> None:
        msg = MessageEvent.model_validate(event)
        bot = context.bot_user_id
        mentioned = bool(bot) and f"<@{bot}>" in msg.text
        if msg.bot_id or not msg.user or msg.subtype not in _USER_SUBTYPES:
            return
        if mentioned or msg.channel_type == "im":
            worker.submit(worker.on_message, msg, bot, time.monotonic())

    @app.command(SLASH_COMMAND)
    def on_command(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        body = CommandBody.model_validate(command)
        req = parse(body.text)
        if req.verb in ("paste", "check"):
            ack(text="Looking…")
        else:
            ack()
        worker.submit(worker.slash, body, req, respond)

    @app.action(blocks.ACTION_COLLECT)
    def on_collect(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        click = ActionBody.model_validate(body)
        channel = click.channel.id if click.channel else ""
        if not HOST_RE.match(click.value) or not click.thread:
            log.warning("collect_host: malformed click refused")
            return
        worker.submit(worker.collect, channel, click.thread, click.user.id, click.value)

    @app.action(blocks.ACTION_FIXED)
    def on_fixed(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        worker.submit(worker.fixed, ActionBody.model_validate(body))

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
        worker.submit(worker.wrong, meta, note, str(body["user"]["id"]))

    @app.event("app_home_opened")
    def on_home(event: dict[str, Any]) -> None:
        home = HomeEvent.model_validate(event)
        if home.tab == "home":
            worker.submit(worker.home, home.user)


# --------------------------------------------------------------------------- transports

class _QuietHandler(WSGIRequestHandler):
    """Request lines go to the debug log, not stderr (no bodies either way)."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of connections overflows it and the kernel
    # drops SYNs, which clients retry after a full second. Slack bursts.
    request_queue_size = 256


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
                self._problem = backend.database_problem(self.settings)
                self._checked = time.monotonic()
            problem = self._problem
        if problem is None:
            return {"status": "ok", "database": "ok"}
        return {"status": "degraded", "database": f"unavailable: {problem}"}


def wsgi_app(bot: SlackBot) -> Callable[..., Iterable[bytes]]:
    """Slack's endpoint at /slack/events (events, commands, interactivity); /healthz for load
    balancers; /metrics for Prometheus (this process's own figures)."""
    slack = SlackRequestHandler(bot.app)
    health = Health(bot.worker.settings)

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
        return slack(environ, start_response)

    return application


def http_server(bot: SlackBot, host: str, port: int) -> WSGIServer:
    """A threaded WSGI server for the bot; `serve_forever()` runs it."""
    return make_server(host, port, wsgi_app(bot), server_class=_ThreadingWSGIServer,
                       handler_class=_QuietHandler)


def socket_mode(app: App, settings: Settings) -> Any:
    """The Socket Mode handler (call `.start()` to block, `.connect()` to run in background)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    require_tokens(settings, http=False)
    assert settings.app_token is not None  # require_tokens said so
    return SocketModeHandler(app, app_token=settings.app_token.get_secret_value())


def run(settings: Settings, *, http: bool, bind: str, port: int) -> None:
    """`inferbot serve`: Socket Mode (blocks on the WebSocket) or the HTTP endpoint. SIGTERM
    stops taking requests and finishes the answers in flight."""
    configure_logging(settings)
    bot = build(settings, http=http)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        if http:
            server = http_server(bot, bind, port)
            log.info("listening on http://%s:%d%s", bind, server.server_port, EVENTS_PATH)
            server.serve_forever()
        else:
            log.info("connecting in Socket Mode")
            socket_mode(bot.app, settings).start()
    finally:
        bot.close()
