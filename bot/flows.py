"""What a person can ask inferbot, once for every adapter: the use cases between the core and
the terminal or Slack.

Each flow takes typed inputs (what was asked, and `Asker`: who asked, from where) and returns a
typed answer; the adapters only parse and render. So a policy lives here once and holds on
every path: which hosts may be collected from (`host_refusal`), how a diagnosis is recorded and
what a store outage costs (`record`: never the answer), redaction of what people type into the
store, and one exception (`StoreDown`) for "the incident database cannot be used now".

Imports of the store, the collector and the KB loader happen inside the flows, so `inferbot
diagnose` pays only for what it uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, TypeVar

from bot.errors import one_line
from bot.schema import CommandRun, Diagnosis, Evidence, Fix, Source, parse
from bot.structs import struct

if TYPE_CHECKING:
    from bot.collect.inventory import Inventory
    from bot.collect.snapshot import Snapshot
    from bot.config import Settings
    from bot.kb.loader import KB
    from bot.render.present import History
    from bot.store import GroupInfo, HistoryRow

T = TypeVar("T")

Origin = Literal["cli", "slack"]


@struct(frozen=True, slots=True, kw_only=True)
class Asker:
    """Who asked, and from where: a login at the terminal, or a Slack user in a channel (and
    thread). Chat requests carry their channel; the terminal has none."""

    origin: Origin
    user: str | None = None
    channel: str | None = None
    thread: str | None = None

    @property
    def audit_name(self) -> str | None:
        """Who ran a host's commands, as the command audit keeps it: a login is marked as the
        terminal's (`cli:alice`), a Slack user id is itself."""
        if self.origin == "cli" and self.user:
            return f"cli:{self.user}"
        return self.user


class StoreDown(Exception):
    """The incident database cannot be used now (unreachable, or migrated by a newer
    inferbot). `str()` is one redacted line."""


# --------------------------------------------------------------------------- recording


@struct(frozen=True, slots=True)
class Stored:
    """The incident is in the store, with what the store knows of the failure before."""

    incident_id: int
    group_id: int
    history: History


@struct(frozen=True, slots=True)
class Spooled:
    """The database is down: the incident waits in the spool and is stored when it is back."""

    warning: str


@struct(frozen=True, slots=True)
class NotStored:
    """Recording failed for another reason (one line); the answer was given all the same."""

    reason: str


Recorded = Stored | Spooled | NotStored


@struct(slots=True)
class Answer:
    """A diagnosis and what became of its record (None: not to be stored)."""

    diagnosis: Diagnosis
    record: Recorded | None = None


def record(d: Diagnosis, asker: Asker, *, source: Source | None = None,
           settings: Settings | None = None) -> Recorded:
    """Store `d` as an incident (sets `d.incident_id`). Whatever goes wrong costs the history
    line, never the answer: a database outage spools the incident; with the spool unwritable
    too, or any other failure, NotStored says in one line that the incident was not kept."""
    import logging  # only here: the diagnose path does not pay for it

    from bot.store import StoreUnavailable
    from bot.store import record as store_record

    try:
        result = store_record(d, source=source or asker.origin, user=asker.user,
                              channel=asker.channel, thread=asker.thread, excerpt=d.excerpt,
                              settings=settings)
    except StoreUnavailable as exc:  # an outage, said by the adapter: not a bug to log loudly
        logging.getLogger(__name__).info("incident not stored: %s", one_line(exc))
        return NotStored(one_line(exc))
    except Exception as exc:  # the answer is already given: report, never raise
        logging.getLogger(__name__).error("recording failed: %s", one_line(exc, typed=True))
        return NotStored(one_line(exc))
    if result.spooled:
        return Spooled(result.warning or "the incident store is down; the incident is spooled")
    assert result.incident_id is not None and result.group_id is not None
    d.incident_id = result.incident_id
    from bot.render.present import History

    history = History(
        incident_id=result.incident_id, count=result.count or 1, first_seen=result.first_seen,
        hosts=(d.host,) if d.host else (), status=result.status or "open",
        fixed_with=result.last_fix, fixed_by=result.last_fixed_by,
        fixed_at=result.last_fixed_at, fixed_link=result.last_fix_link)
    return Stored(result.incident_id, result.group_id, history)


# --------------------------------------------------------------------------- diagnosing


def _diagnose(paste: str | BinaryIO, asker: Asker, kb: KB, host: str | None) -> Diagnosis:
    from bot.diagnose import diagnose

    evidence = Evidence(source=asker.origin, host=host, channel=asker.channel,
                        thread=asker.thread, user=asker.user)
    if isinstance(paste, str):
        return diagnose(dataclasses.replace(evidence, text=paste), kb)
    return diagnose(evidence, kb, paste)


def diagnose_and_record(paste: str | BinaryIO, asker: Asker, kb: KB, *,
                        host: str | None = None, store: bool = True,
                        settings: Settings | None = None) -> Answer:
    """Diagnose a paste (text, or a stream read in bounded chunks), then record it."""
    d = _diagnose(paste, asker, kb, host)
    return Answer(d, record(d, asker, settings=settings) if store else None)


@struct(frozen=True, slots=True)
class Repeat:
    """The paste is the failure this thread was already answered for: no new incident, the
    paste counted on the first one (`pastes` in all, the first included)."""

    incident_id: int
    pastes: int
    first_fix: Fix | None  # the answer's first fix, to ask whether it failed
    permalink: str | None  # the answer, to show it again


def diagnose_in_thread(paste: str, asker: Asker, kb: KB, *,
                       settings: Settings | None = None) -> Answer | Repeat:
    """A paste in a chat thread: the same failure as the thread's incident (the same
    fingerprint) is a Repeat, counted and not stored again; anything else is diagnosed and
    recorded. A store that is down or hung (each lookup has the database deadline) costs the
    repeat check, never the answer."""
    from bot.store import REPEAT, incident_view, thread_incident
    from bot.store import feedback as store_feedback

    d = _diagnose(paste, asker, kb, None)
    if asker.channel and asker.thread:
        channel, thread = asker.channel, asker.thread
        view = None
        try:
            prior = _store_call(lambda: thread_incident(channel, thread, settings=settings))
            if prior is not None:
                seen = prior
                view = _store_call(lambda: incident_view(seen, settings=settings))
        except StoreDown:
            pass
        if view is not None and view.diagnosis.get("fingerprint") == d.fingerprint.digest:
            try:
                _store_call(lambda: store_feedback(seen, note="", who=asker.user, kind=REPEAT,
                                                   settings=settings))
            except StoreDown as exc:  # the repeat is still said; this paste goes uncounted
                import logging

                logging.getLogger(__name__).info("repeat not counted: %s", exc)
            fixes = view.diagnosis.get("fixes") or []
            first = parse(Fix, fixes[0]) if fixes else None
            return Repeat(seen, view.repeats + 2, first, view.permalink)
    return Answer(d, record(d, asker, settings=settings))


# --------------------------------------------------------------------------- hosts


def host_refusal(name: str, asker: Asker, inventory: Inventory | None, *,
                 allow_localhost: bool) -> str | None:
    """Why `name` may not be collected from for `asker` (one line starting "refused "), or
    None. The same rules on every path: a valid name; this machine only from the terminal and
    only where the operator allowed it (INFERBOT_ALLOW_LOCALHOST), since a chat request would
    run commands on the bot's own server; otherwise an inventory host, and from chat only in
    the channels its entry lists. The terminal has no channel: whoever runs it already reads
    the inventory and its key."""
    from bot.collect.inventory import LOCAL_NAME, HostRefused, check_name

    try:
        if check_name(name) == LOCAL_NAME:
            if asker.origin != "cli":
                return (f"refused {name!r}: the bot's own machine is checked with `inferbot "
                        "check --local` there, not from chat")
            if not allow_localhost:
                return (f"refused {name!r}: this machine is read only where the operator "
                        "allows it: set INFERBOT_ALLOW_LOCALHOST=true")
            return None
        if inventory is None:
            return f"refused {name!r}: no inventory"
        target = inventory.resolve(name)
    except HostRefused as exc:
        return str(exc)
    if asker.channel is not None and target.channels and asker.channel not in target.channels:
        return (f"refused {name!r}: not allowed from this channel (see the inventory's "
                "`channels`)")
    return None


@struct(slots=True)
class HostAnswer:
    """One host: what was collected (or why not), its diagnosis and its record."""

    snapshot: Snapshot
    answer: Answer | None = None  # None: nothing was collected to diagnose

    @property
    def refused(self) -> bool:
        return self.snapshot.error is not None and self.snapshot.error.startswith("refused ")


def check_hosts(names: Sequence[str], asker: Asker, kb: Callable[[], KB], *,
                inventory: Inventory | Path | None = None, settings: Settings | None = None,
                deadline_s: float | None = None, store: bool = True) -> list[HostAnswer]:
    """Collect from each named host (in parallel, each within `deadline_s`), audit every
    command run, diagnose each host with its own numbers and record it. A refused name is
    answered with its reason, and nothing is contacted for it. `inventory` (an Inventory, its
    file, or None for the configured one) is read only when a name needs it, and raises
    InventoryError when it cannot be; `kb` is called only when a host was collected."""
    from bot import metrics
    from bot.collect.inventory import LOCAL_NAME, Inventory, load_inventory, valid_name
    from bot.collect.runner import DEFAULT_DEADLINE_S, audit_records
    from bot.collect.runner import check_hosts as collect_hosts
    from bot.collect.snapshot import Snapshot
    from bot.config import get_settings
    from bot.diagnose import diagnose

    s = settings if settings is not None else get_settings()
    names = list(dict.fromkeys(names))
    inv = inventory if isinstance(inventory, Inventory) else None
    if inv is None and any(n != LOCAL_NAME and valid_name(n) for n in names):
        inv = load_inventory(inventory if isinstance(inventory, Path) else None)
    refusals = {n: host_refusal(n, asker, inv, allow_localhost=s.allow_localhost)
                for n in names}
    allowed = [n for n in names if refusals[n] is None]
    limit = deadline_s if deadline_s is not None else DEFAULT_DEADLINE_S
    collected = dict(zip(allowed, collect_hosts(allowed, inv, deadline_s=limit), strict=True))
    snaps = [collected.get(n) or Snapshot(host=n, method="local" if n == LOCAL_NAME else "ssh",
                                          error=refusals[n]) for n in names]
    _audit(audit_records(snaps, who=asker.audit_name), s)
    failed = sum(1 for n in allowed if collected[n].error)
    if failed:
        metrics.SSH_ERRORS.inc(amount=failed)
    answers = [HostAnswer(snap) for snap in snaps]
    ok = [a for a in answers if a.snapshot.error is None]
    current = kb() if ok else None
    # A chat request is recorded as Slack's (its channel and thread lead back to the
    # answer); a terminal one as the collector's.
    source: Source = "slack" if asker.origin == "slack" else "collector"
    for a in ok:
        assert current is not None
        evidence = dataclasses.replace(a.snapshot.evidence(), source=source,
                                       channel=asker.channel, thread=asker.thread,
                                       user=asker.user)
        d = diagnose(evidence, current)
        a.answer = Answer(d, record(d, asker, source=source, settings=s) if store else None)
    return answers


def _audit(runs: Sequence[CommandRun], settings: Settings) -> None:
    """Keep the audit trail of a check (the store spools it while the database is down)."""
    if runs:
        from bot.store import record_commands

        record_commands(runs, settings=settings)


# --------------------------------------------------------------------------- the store


@struct(frozen=True, slots=True, kw_only=True)
class HistoryQuery:
    """What `history` filters by; every field optional. `since` takes 7d, 12h, 30m, 2w or an
    ISO date; `search` words that must all appear."""

    host: str | None = None
    problem: str | None = None
    model: str | None = None
    engine_version: str | None = None
    status: str | None = None
    since: str | None = None
    search: str | None = None
    limit: int = 50


def _store_call(fn: Callable[[], T]) -> T:
    """Run a store operation; its "cannot use the database now" errors become StoreDown."""
    from bot.store import SchemaTooNew, StoreUnavailable

    try:
        return fn()
    except (StoreUnavailable, SchemaTooNew) as exc:
        raise StoreDown(one_line(exc)) from exc


def history(q: HistoryQuery, settings: Settings | None = None) -> list[HistoryRow]:
    """Stored incidents, newest first. ValueError for a bad filter, StoreDown."""
    from bot.store import history as store_history

    return _store_call(lambda: store_history(
        host=q.host, problem=q.problem, model=q.model, engine_version=q.engine_version,
        status=q.status, since=q.since, search=q.search, limit=q.limit, settings=settings))


class NoIncident(LookupError):
    """`resolve` named no incident, and the thread it was asked in has none."""


def resolve(ref: int | str | None, asker: Asker, *, fix: str, note: str | None = None,
            settings: Settings | None = None) -> GroupInfo:
    """Record what fixed incident `ref` (`12`) or group `ref` (`g3`); None: the incident
    diagnosed in the asker's Slack thread (NoIncident when there is none). What people type is
    redacted before it is stored. LookupError: no such incident; ValueError: a bad reference
    or an empty fix; StoreDown."""
    from bot.evidence.redact import redact
    from bot.store import incident_origin, thread_incident
    from bot.store import resolve as store_resolve

    link = None
    if ref is None:
        if asker.channel is not None and asker.thread:
            channel, thread = asker.channel, asker.thread
            ref = _store_call(lambda: thread_incident(channel, thread, settings=settings))
        if ref is None:
            raise NoIncident("no incident was diagnosed in this thread")
        here = ref
        origin = _store_call(lambda: incident_origin(int(here), settings=settings))
        link = origin.permalink if origin else None
    incident = ref
    return _store_call(lambda: store_resolve(
        incident, fix=redact(fix), note=redact(note) if note else None, who=asker.user,
        link=link, settings=settings))


@struct(frozen=True, slots=True)
class FixWorked:
    """A fix the answer offered, recorded as what fixed its incident."""

    group: GroupInfo
    command: str


def resolve_with_fix(incident_id: int, fix_id: str, asker: Asker, *,
                     settings: Settings | None = None) -> FixWorked:
    """"This fixed it": the click names an incident and one of its fixes; the command recorded
    is the store's text of that fix, and the click must come from the incident's own channel.
    LookupError when it does not, or there is no such fix; StoreDown."""
    from bot.store import incident_origin
    from bot.store import resolve as store_resolve

    origin = _store_call(lambda: incident_origin(incident_id, fix_id, settings=settings))
    if origin is None or origin.channel != asker.channel or origin.fix_command is None:
        raise LookupError(f"Incident {incident_id} in this channel has no fix {fix_id}.")
    command, link = origin.fix_command, origin.permalink
    group = _store_call(lambda: store_resolve(incident_id, fix=command, who=asker.user,
                                              link=link, settings=settings))
    return FixWorked(group, command)


@struct(frozen=True, slots=True)
class ShownIncident:
    """A stored answer to show again: its diagnosis, the history as it stands now, and who
    fixed it with what since it was posted (None: not fixed since)."""

    diagnosis: Diagnosis
    history: History
    fixed: tuple[str, str] | None


def shown_incident(incident_id: int, asker: Asker, *, settings: Settings | None = None
                   ) -> ShownIncident:
    """Incident `incident_id` of the asker's channel, to redraw its message (Details, "This
    fixed it"). LookupError for another channel's or none; StoreDown."""
    from bot.render.present import History
    from bot.store import incident_view

    view = _store_call(lambda: incident_view(incident_id, settings=settings))
    if view is None or view.channel != asker.channel:
        raise LookupError(f"Incident {incident_id} is not an incident of this channel.")
    d = parse(Diagnosis, {k: v for k, v in view.diagnosis.items() if k != "presented"})
    g = view.group
    history = History(
        incident_id=incident_id, count=g.count, first_seen=g.first_seen,
        hosts=(g.host,) if g.host else (), status=g.status, fixed_with=g.resolution_fix,
        fixed_by=g.resolved_by, fixed_at=g.resolved_at, fixed_link=g.resolution_link,
        corrections=view.corrections)
    fixed = None
    if g.status == "resolved" and g.resolution_fix and g.resolved_at is not None and (
            g.resolved_at >= view.created_at):
        fixed = (g.resolved_by or "someone", g.resolution_fix)
    return ShownIncident(d, history, fixed)


def link_answer(incident_id: int, permalink: str, *, settings: Settings | None = None
                ) -> None:
    """Remember where incident `incident_id`'s answer is (a Slack permalink), for the history
    line's "(thread)" and `inferbot history`. StoreDown."""
    from bot.store import set_permalink

    _store_call(lambda: set_permalink(incident_id, permalink, settings=settings))


def feedback(incident_id: int, asker: Asker, *, note: str, kind: str = "wrong_diagnosis",
             settings: Settings | None = None) -> int:
    """"Not right?" (or "fix_failed"): a note for the KB maintainers on an incident of the
    asker's channel (redacted before it is stored); its id. LookupError for another
    channel's; StoreDown."""
    from bot.evidence.redact import redact
    from bot.store import feedback as store_feedback
    from bot.store import incident_origin

    origin = _store_call(lambda: incident_origin(incident_id, settings=settings))
    if origin is None or origin.channel != asker.channel:
        raise LookupError(f"Incident {incident_id} is not an incident of this channel.")
    return _store_call(lambda: store_feedback(incident_id, note=redact(note), who=asker.user,
                                              kind=kind, settings=settings))


def prepare_store(settings: Settings | None = None) -> None:
    """A server about to take requests: its store migrated now if it is behind (past the
    database deadline the migration goes on while incidents are spooled). StoreDown."""
    from bot.store import prepare

    _store_call(lambda: prepare(settings))


def upgrade_store(settings: Settings | None = None) -> str | None:
    """Migrate the incident database to this inferbot's schema now; the revision. StoreDown."""
    from bot.store import upgrade

    return _store_call(lambda: upgrade(settings))
