"""What happens after the ack: one small handler per verb, each a flow (bot.flows) and its
rendering (bot.slack.blocks), sent through `Outbound`.

Handlers run on the worker pool, never in a listener. A message is answered once across
replicas (`Dedup`), collection is for the people and channels the settings allow
(`Authorizer`, on every request and every click), and the rest of the policy is the flows'.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from slack_bolt import Respond

from bot import flows, metrics
from bot.config import Settings
from bot.errors import one_line
from bot.flows import Asker, NotStored, Spooled, Stored, StoreDown
from bot.schema import Diagnosis
from bot.slack import blocks
from bot.slack.authz import Authorizer
from bot.slack.blocks import Reply
from bot.slack.dedup import Dedup, message_key
from bot.slack.files import download_all
from bot.slack.outbound import Outbound
from bot.slack.parse import HOST_RE, ParseError, Request, history_query, host_arg, parse, size_query
from bot.slack.payloads import ActionBody, CommandBody, FeedbackMeta, MessageEvent
from bot.structs import struct

if TYPE_CHECKING:
    from bot.kb.loader import KB
    from bot.sizing.calculators import SizeReport
    from bot.slack.parse import SizeQuery

log = logging.getLogger("inferbot.slack")

FIX_VALUE = re.compile(r"^(\d{1,18}):([a-z0-9][a-z0-9_.:-]{0,99})$")
DETAILS_VALUE = re.compile(r"^(\d{1,18}):(more|less)$")
_INCIDENT_REF = re.compile(r"(?:#?\d{1,18}|g\d{1,18})")
STORE_DOWN = "The incident store is unavailable right now; try again in a minute."
# The answer when the work queue is full (settings.work_queue): quick, and says what to do.
BUSY = ("I'm answering too many requests right now and could not take this one: "
        "please mention me again in a minute.")
# The verbs answered from the store, and what their placeholder says is being looked at.
STORE_VERBS = {"history": "the history", "resolve": "the incident"}


@struct
class Handlers:
    """The handlers and what they share: the settings, the way out, who may collect, the
    dedup, the KB, and `later` (work queued behind the answers waiting, such as charts, off
    the channel's turn; False when the queue is full)."""

    settings: Settings
    out: Outbound
    authz: Authorizer
    dedup: Dedup
    kb: Callable[[], KB]
    later: Callable[..., bool]

    # ----- messages (mentions, DMs)

    def message(self, msg: MessageEvent, bot_user_id: str | None,
                received: float | None = None) -> None:
        """Answer one message (once across replicas); `received` (time.monotonic() when the
        request arrived) starts the reply-latency clock, so queueing behind a burst counts."""
        started = received if received is not None else time.monotonic()
        key = message_key(msg.channel, msg.ts)
        if not self.dedup.first_here(key):
            log.info("duplicate delivery of %s/%s ignored", msg.channel, msg.ts)
            return
        req = parse(msg.text, bot_user_id, has_files=bool(msg.files))
        if req.verb in STORE_VERBS:
            self.from_store(msg, req, started)
            return
        # A paste shows its placeholder before the database is asked anything (the reply-once
        # key included), so a slow or hung database never leaves the user without a sign.
        looking = (self.out.post(msg.channel, msg.thread, blocks.looking("the paste"))
                   if req.verb == "paste" else None)
        if not self.dedup.claim(key):
            log.info("delivery of %s/%s answered by another replica", msg.channel, msg.ts)
            if looking is not None:
                self.out.delete(msg.channel, looking)
            return
        asker = Asker(origin="slack", user=msg.user or "", channel=msg.channel,
                      thread=msg.thread)
        if looking is not None:
            self.paste(msg, req, asker, looking)
        elif req.verb == "check":
            self.check(asker, req.args)
        else:
            self.out.post(msg.channel, msg.thread, self.quick(req, asker))
            if req.verb == "size":
                self.later(self.size_chart, req.args, msg.channel, msg.thread)
        metrics.REPLY_SECONDS.observe(time.monotonic() - started, req.verb)

    def from_store(self, msg: MessageEvent, req: Request, started: float) -> None:
        """`history` and `resolve`: the placeholder takes the channel's turn; the reply-once
        claim and the store's work follow it off the turn. A hung store costs them the
        database deadline, which on the turn would hold the channel's next paste,
        placeholder and all, behind a lookup that paste does not need."""
        looking = self.out.post(msg.channel, msg.thread, blocks.looking(STORE_VERBS[req.verb]))
        if not self.later(self.store_reply, msg, req, looking, started):
            self.out.update(msg.channel, looking, msg.thread, blocks.message(BUSY))

    def store_reply(self, msg: MessageEvent, req: Request, looking: str,
                    started: float) -> None:
        """The store's answer in place of its placeholder (once across replicas)."""
        with self.replacing(msg.channel, looking, msg.thread):
            if not self.dedup.claim(message_key(msg.channel, msg.ts)):
                log.info("delivery of %s/%s answered by another replica", msg.channel, msg.ts)
                self.out.delete(msg.channel, looking)
                return
            asker = Asker(origin="slack", user=msg.user or "", channel=msg.channel,
                          thread=msg.thread)
            self.out.update(msg.channel, looking, msg.thread, self.quick(req, asker))
        metrics.REPLY_SECONDS.observe(time.monotonic() - started, req.verb)

    @contextlib.contextmanager
    def replacing(self, channel: str, looking: str, thread: str) -> Iterator[None]:
        """Whatever fails inside, the "Looking…" placeholder does not stay standing."""
        try:
            yield
        except Exception as exc:
            self.out.update(channel, looking, thread, blocks.message(
                f"Sorry, that failed ({type(exc).__name__}); the error is in the bot's log."))
            raise

    def quick(self, req: Request, asker: Asker) -> Reply:
        """The verbs answered from the store, the KB or the calculators (no collection)."""
        try:
            if req.verb == "history":
                return self.history(req.args)
            if req.verb == "size":
                return self.size(req.args)
            if req.verb == "resolve":
                return self.resolve(req.args, asker)
            if req.verb == "kb":
                kb = self.kb()
                log_entries = [(c.version, c.date, list(c.changes)) for c in kb.meta.changelog]
                return blocks.kb_reply(kb.version, kb.content_hash, log_entries)
        except StoreDown:
            return blocks.message(STORE_DOWN)
        except ValueError as exc:  # ParseError, and the calculators' unknown model or GPU
            return blocks.message(blocks.esc(one_line(exc)))
        return blocks.help_reply()

    def size(self, args: list[str]) -> Reply:
        """`size MODEL on GPU ...`; a name the catalogs do not know gets its close matches
        and the catalog to choose from, never "pass a config.json"."""
        from bot.sizing.catalog import UnknownName, gpus, models

        try:
            text = _size_text(_size(size_query(args)))
        except UnknownName as exc:
            if not exc.kind:
                raise
            catalog = sorted(models()) if exc.kind == "model" else sorted(
                g.name for g in gpus().values())
            return blocks.size_choices(exc.kind, exc.query, list(exc.close), catalog, args)
        return blocks.preformatted("*Sizing*", text, "sizing.txt")

    def size_pick(self, body: ActionBody) -> None:
        """A model or GPU chosen from `size`'s choices: the sizing, in the same thread."""
        channel = body.channel.id if body.channel else ""
        args = body.value.split()
        asker = Asker(origin="slack", user=body.user.id, channel=channel, thread=body.thread)
        reply = self.quick(Request(verb="size", args=args), asker)
        self.out.post(channel, body.thread or "", reply)
        self.later(self.size_chart, args, channel, body.thread or "")

    def paste(self, msg: MessageEvent, req: Request, asker: Asker, looking: str) -> None:
        with self.replacing(msg.channel, looking, msg.thread):
            text, notes = self.gather(req.paste, msg.files)
            if not text.strip():
                reply = blocks.message("\n".join(blocks.esc(n) for n in notes) + "\n"
                                       + blocks.HELP)
                self.out.update(msg.channel, looking, msg.thread, reply)
                return
            answer = flows.diagnose_in_thread(text, asker, self.kb(), settings=self.settings)
            if isinstance(answer, flows.Repeat):
                metrics.FEEDBACK.inc("repeat")
                first = answer.first_fix.id if answer.first_fix else None
                self.out.update(msg.channel, looking, msg.thread, blocks.repeat_reply(
                    answer.incident_id, answer.pastes, first, answer.permalink))
                return
            self.answer(answer, asker, looking, notes)

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
            token = self.settings.bot_token.get_secret_value() if self.settings.bot_token else ""
            for got in download_all(files, self.out.client, token,
                                    self.settings.max_file_bytes, self.settings.slack_api_url):
                if got.skipped:
                    notes.append(got.skipped)
                    continue
                parts.append(got.text)
                if got.truncated:
                    notes.append(f"{got.name}: only the first "
                                 f"{self.settings.max_file_bytes // 1024} KiB were read")
        return "\n".join(parts), notes

    def answer(self, answer: flows.Answer, asker: Asker, looking: str,
               notes: Iterable[str] = ()) -> None:
        """Replace the "looking" message with the answer; its permalink is stored and the
        chart drawn after it, as follow-ups: the channel's next message waits for neither."""
        d, channel, thread = answer.diagnosis, asker.channel or "", asker.thread or ""
        reply = _answer_reply(answer, note="; ".join(notes) or None)
        self.out.update(channel, looking, thread, reply)
        if isinstance(answer.record, Stored):
            self.later(self.link, answer.record.incident_id, channel, looking)
        if d.problems:
            # Rendering takes a few hundred ms of CPU: queued behind the answers already
            # waiting, so a burst gets every text answer before the charts (and none is
            # drawn when the numbers cannot tell a story).
            self.later(self.chart, d, channel, thread)

    def link(self, incident_id: int, channel: str, ts: str) -> None:
        """Remember where incident `incident_id`'s answer (message `ts`) is, for the history
        line's "(thread)". Off the channel's turn, since a store that hangs here would hold
        the next message in the channel for the database deadline, placeholder and all."""
        if link := self.out.permalink(channel, ts):
            try:
                flows.link_answer(incident_id, link, settings=self.settings)
            except StoreDown:
                log.warning("the answer's permalink was not stored: the store is down")

    def chart(self, source: Diagnosis | SizeReport, channel: str, thread: str) -> None:
        from bot.sizing.chart import chart_png

        drawn = chart_png(source)
        if drawn:
            png, sentence = drawn
            self.out.upload(channel, thread, png, "memory-budget.png", "GPU memory budget",
                            comment=sentence or None)

    def size_chart(self, args: list[str], channel: str, thread: str) -> None:
        """The sizing's memory chart, after its text answer (a bad query was answered)."""
        try:
            report = _size(size_query(args))
        except ValueError:
            return
        self.chart(report, channel, thread)

    # ----- the slash command

    def slash(self, body: CommandBody, req: Request, respond: Respond) -> None:
        """`/inferbot ...` answers through response_url (slash commands have no thread):
        privately, except a diagnosis, which the channel sees."""
        asker = Asker(origin="slack", user=body.user_id, channel=body.channel_id, thread="")
        if req.verb not in ("paste", "check"):
            reply = self.quick(req, Asker(origin="slack", user=body.user_id,
                                          channel=body.channel_id))
            respond(text=reply.text, blocks=reply.blocks, response_type="ephemeral")
            return
        try:
            if req.verb == "check":
                host = host_arg(req.args)
                if not self.authz.may_collect(asker.user or "", asker.channel):
                    respond(text=f"You may not collect from hosts. {self.authz.who_can()}",
                            response_type="ephemeral")
                    return
                answer = self.collect_one(asker, host)
            else:
                answer = flows.diagnose_and_record(req.paste[:self.settings.max_paste_bytes],
                                                   asker, self.kb(), settings=self.settings)
        except Exception as exc:  # a refused or unreachable host, a bad word: say why
            respond(text=blocks.esc(one_line(exc)), response_type="ephemeral")
            return
        reply = _answer_reply(answer)
        respond(text=reply.text, blocks=reply.blocks, response_type="in_channel")

    # ----- collection

    def check(self, asker: Asker, args: list[str]) -> None:
        try:
            host = host_arg(args)
        except ParseError as exc:
            self.out.post(asker.channel or "", asker.thread or "",
                          blocks.message(blocks.esc(one_line(exc))))
            return
        self.collect(asker, host)

    def collect(self, asker: Asker, host: str) -> None:
        """`check HOST` or a "Collect from HOST" click, in the thread."""
        channel, thread, user = asker.channel or "", asker.thread or "", asker.user or ""
        if not self.authz.may_collect(user, channel):
            self.out.ephemeral(channel, user, thread,
                               f"You may not collect from hosts. {self.authz.who_can()}")
            return
        looking = self.out.post(channel, thread, blocks.looking(host))
        try:
            answer = self.collect_one(asker, host)
        except Exception as exc:  # refused by the inventory, unreachable, timed out
            self.out.update(channel, looking, thread, blocks.message(
                f"Could not collect from `{blocks.esc(host)}`: "
                f"{blocks.esc(one_line(exc))}"))
            return
        self.answer(answer, asker, looking)

    def collect_one(self, asker: Asker, host: str) -> flows.Answer:
        """One host through the check flow; CollectFailed with its reason when it gave
        nothing to diagnose (refused, unreachable, timed out)."""
        [result] = flows.check_hosts([host], asker, self.kb, settings=self.settings)
        if result.answer is None:
            raise CollectFailed(result.snapshot.error or f"{host}: nothing collected")
        return result.answer

    # ----- store-backed verbs

    def history(self, args: list[str]) -> Reply:
        q = history_query(args)
        rows = flows.history(flows.HistoryQuery(host=q.host, problem=q.problem, model=q.model,
                                                since=q.since, search=q.search, limit=10),
                             self.settings)
        from bot.store import format_history_text

        described = ", ".join(f"{k} {v}" for k, v in q.model_dump(exclude_none=True).items())
        title = f"*History*{' (' + blocks.esc(described) + ')' if described else ''}"
        return blocks.history_reply(title, format_history_text(rows))

    def resolve(self, args: list[str], asker: Asker) -> Reply:
        """`resolve [INCIDENT] FIX`: the incident is the one given, else this thread's."""
        ref: str | None = None
        if args and _INCIDENT_REF.fullmatch(args[0]):
            ref, args = args[0].lstrip("#"), args[1:]
        fix = " ".join(args).strip() or "marked fixed"
        try:
            group = flows.resolve(ref, asker, fix=fix, settings=self.settings)
        except flows.NoIncident:
            return blocks.message("Which incident? Say `resolve FIX` in the incident's thread, "
                                  "or `resolve INCIDENT FIX`.")
        except (LookupError, ValueError) as exc:
            return blocks.message(blocks.esc(one_line(exc)))
        used = blocks.esc(group.resolution_fix or fix)
        return blocks.message(f"Marked fixed (seen {group.count} times) with: `{used}`")

    def fixed(self, body: ActionBody) -> None:
        """"This fixed it", a choice among the answer's fixes: the value names incident and
        fix; the flow takes the fix's text from the store, and the click must come from the
        incident's own channel. The answer is then edited to say who fixed it with what, and
        its buttons go."""
        channel = body.channel.id if body.channel else ""
        m = FIX_VALUE.match(body.value)
        if m is None:
            log.warning("fix_worked: malformed value refused")
            return
        incident_id, fix_id = int(m.group(1)), m.group(2)
        asker = Asker(origin="slack", user=body.user.id, channel=channel, thread=body.thread)
        try:
            flows.resolve_with_fix(incident_id, fix_id, asker, settings=self.settings)
        except StoreDown:
            self.out.ephemeral(channel, body.user.id, body.thread, STORE_DOWN)
            return
        except LookupError as exc:
            self.out.ephemeral(channel, body.user.id, body.thread, str(exc))
            return
        self.redraw(body, incident_id, expanded=False)

    def details(self, body: ActionBody) -> None:
        """"Details" / "Less": the answer's message redrawn in place, expanded or not."""
        m = DETAILS_VALUE.match(body.value)
        if m is None:
            log.warning("details: malformed value refused")
            return
        self.redraw(body, int(m.group(1)), expanded=m.group(2) == "more")

    def redraw(self, body: ActionBody, incident_id: int, *, expanded: bool) -> None:
        """Replace the clicked message with incident `incident_id`'s answer as it stands."""
        channel = body.channel.id if body.channel else ""
        ts = body.container.message_ts
        if ts is None:
            return
        asker = Asker(origin="slack", user=body.user.id, channel=channel, thread=body.thread)
        try:
            shown = flows.shown_incident(incident_id, asker, settings=self.settings)
        except StoreDown:
            self.out.ephemeral(channel, body.user.id, body.thread, STORE_DOWN)
            return
        except LookupError as exc:
            self.out.ephemeral(channel, body.user.id, body.thread, one_line(exc))
            return
        d = shown.diagnosis
        fixed = blocks.Fixed(*shown.fixed) if shown.fixed else None
        reply = blocks.answer(d, history=shown.history, incident_id=incident_id, host=d.host,
                              can_collect_from=_collectable(d), expanded=expanded, fixed=fixed)
        if body.container.thread_ts is None and body.response_url:
            # an answer outside any thread is a slash command's, posted through response_url
            self.out.replace(body.response_url, reply)
        else:
            self.out.edit(channel, ts, reply)

    def fix_failed(self, body: ActionBody) -> None:
        """"Mark fix 1 failed" on a repeat: stored as feedback on the thread's incident."""
        channel = body.channel.id if body.channel else ""
        m = FIX_VALUE.match(body.value)
        if m is None:
            log.warning("fix_failed: malformed value refused")
            return
        asker = Asker(origin="slack", user=body.user.id, channel=channel, thread=body.thread)
        try:
            flows.feedback(int(m.group(1)), asker, note=f"fix {m.group(2)} did not work",
                           kind="fix_failed", settings=self.settings)
            metrics.FEEDBACK.inc("fix_failed")
            text = "Recorded: fix 1 did not work. The knowledge-base maintainers will see it."
        except StoreDown:
            text = "The incident store is unavailable; nothing was recorded."
        except LookupError as exc:
            text = str(exc)
        self.out.ephemeral(channel, body.user.id, body.thread, text)

    def wrong(self, meta: FeedbackMeta, note: str, user: str) -> None:
        """"Not right?" submitted: stored as feedback on an incident of that channel."""
        asker = Asker(origin="slack", user=user, channel=meta.channel, thread=meta.thread)
        try:
            flows.feedback(meta.incident_id, asker, note=note, settings=self.settings)
            metrics.FEEDBACK.inc("wrong_diagnosis")
            text = f"Thanks: your note on incident {meta.incident_id} was recorded."
        except StoreDown:
            text = "The incident store is unavailable; your note was not recorded."
        except LookupError as exc:
            text = str(exc)
        self.out.ephemeral(meta.channel, user, meta.thread, text)

    # ----- App Home

    def home(self, user: str) -> None:
        recent: list[str] = []
        recurring: list[str] = []
        note = None
        try:
            rows = flows.history(flows.HistoryQuery(limit=200), self.settings)
        except StoreDown:
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
            recurring.append(f"{r.count}x · {blocks.esc(r.host or '-')} · "
                             f"{blocks.esc(r.problem_title or 'no match')}{fixed}")
        view = blocks.home_view(recent, recurring, self.kb().version, note)
        self.out.client.views_publish(user_id=user, view=view)


class CollectFailed(Exception):
    """A host gave nothing to diagnose. `str()` is one line for the user."""


def _answer_reply(answer: flows.Answer, note: str | None = None) -> Reply:
    """The diagnosis as a reply, with what became of its record; counted by its problem."""
    d = answer.diagnosis
    rec = answer.record
    history, incident_id = None, None
    if isinstance(rec, Stored):
        history, incident_id = rec.history, rec.incident_id
    elif isinstance(rec, Spooled):
        note = "; ".join(filter(None, [note, "History unavailable: the incident store is "
                                       "down; this incident is kept and stored when it is "
                                       "back."]))
    elif isinstance(rec, NotStored):
        note = "; ".join(filter(None, [note, "History unavailable: the incident could not "
                                       "be recorded."]))
    metrics.DIAGNOSES.inc(d.problems[0].id if d.problems else "none")
    return blocks.answer(d, history=history, incident_id=incident_id, host=d.host,
                         can_collect_from=_collectable(d), note=note)


def _collectable(d: Diagnosis) -> str | None:
    return d.host if d.host and HOST_RE.match(d.host) else None


def _size(q: SizeQuery) -> SizeReport:
    """`size MODEL on GPU ...`: the calculators. ValueError for an unknown model/GPU."""
    from bot.sizing.calculators import size

    return size(q.model, q.gpu, gpus=q.gpus, tp=q.tp, max_model_len=q.max_model_len,
                concurrency=q.concurrency, kv_cache_dtype=q.kv_cache_dtype,
                gpu_memory_utilization=q.gpu_memory_utilization)


def _size_text(report: SizeReport) -> str:
    from bot.sizing.calculators import render_size_text

    return render_size_text(report)
