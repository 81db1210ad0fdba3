"""Exactly one reply per message, across retries, double delivery and replicas.

Slack retries an event it thinks went unanswered (`X-Slack-Retry-Num`, up to 3 times, the first
after 3 s whether or not the first delivery is still being worked on), and a message that
mentions the bot arrives twice when the app also subscribes to `message.*` events: once as
`app_mention`, once as `message`, each with its own `event_id`. What the deliveries share is the
message itself, so the key is `(channel, ts)`.

The database decides: the key is INSERTed into a table with a unique constraint, and only the
process whose insert succeeds answers, whichever replica the retry reached. A per-process cache
answers repeats without a round trip (`first_here`, asked before anything touches the
database). When the database is down or hangs past its deadline the cache alone decides: the
user still gets an answer, which beats silence during an outage, and the key waits in
`pending` until the database is back (tried again every RECONCILE_EVERY_S s and before the next
claim), so a retry that reaches another replica after the outage finds it claimed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime, timedelta

from bot import metrics
from bot.config import Settings
from bot.store import SchemaTooNew, StoreUnavailable, claim_event_key

log = logging.getLogger(__name__)

LOCAL_KEYS = 10_000
# Slack's last retry comes about 5 minutes after the first delivery; a day is ample.
KEEP = timedelta(days=1)
PRUNE_EVERY_S = 600.0
RECONCILE_EVERY_S = 5.0


def message_key(channel: str, ts: str) -> str:
    return f"msg:{channel}:{ts}"


class Dedup:
    """`first_here(key)` then `claim(key)`: both True exactly once per key."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._pending: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._last_prune = 0.0
        self._timer: threading.Timer | None = None

    def first_here(self, key: str) -> bool:
        """False if this process already saw `key` (no database involved)."""
        with self._lock:
            if key in self._seen:
                metrics.DEDUP_HITS.inc("local")
                return False
            self._seen[key] = None
            while len(self._seen) > LOCAL_KEYS:
                self._seen.popitem(last=False)
            return True

    def claim(self, key: str) -> bool:
        """True unless the database says another process (or replica) has `key`."""
        self.reconcile()
        now = time.monotonic()
        prune = None
        if now - self._last_prune > PRUNE_EVERY_S:
            self._last_prune = now
            prune = datetime.now(UTC) - KEEP
        try:
            claimed = claim_event_key(key, prune_before=prune, settings=self._settings)
        except (StoreUnavailable, SchemaTooNew) as exc:
            log.warning("dedup: database unavailable (%s); this replica answers on its own "
                        "and records the key when the database is back", type(exc).__name__)
            self._wait(key)
            return True
        if not claimed:
            metrics.DEDUP_HITS.inc("database")
        return claimed

    def _wait(self, key: str) -> None:
        with self._lock:
            self._pending[key] = None
            while len(self._pending) > LOCAL_KEYS:
                self._pending.popitem(last=False)
        self._schedule()

    def _schedule(self) -> None:
        with self._lock:
            if self._timer is None and self._pending:
                self._timer = threading.Timer(RECONCILE_EVERY_S, self._retry)
                self._timer.daemon = True
                self._timer.start()

    def _retry(self) -> None:
        with self._lock:
            self._timer = None
        self.reconcile()
        self._schedule()

    def reconcile(self) -> int:
        """Record the keys answered during an outage; how many were written. Stops at the
        first failure (the database is still away)."""
        with self._lock:
            keys = list(self._pending)
        written = 0
        for key in keys:
            try:
                claim_event_key(key, settings=self._settings)
            except (StoreUnavailable, SchemaTooNew):
                break
            with self._lock:
                self._pending.pop(key, None)
            written += 1
        if written:
            log.info("dedup: %d key(s) answered during the outage recorded", written)
        return written
