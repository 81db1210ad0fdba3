"""Exactly one reply per message, across retries, double delivery and replicas.

Slack retries an event it thinks went unanswered (`X-Slack-Retry-Num`, up to 3 times, the first
after 3 s whether or not the first delivery is still being worked on), and a message that
mentions the bot arrives twice when the app also subscribes to `message.*` events: once as
`app_mention`, once as `message`, each with its own `event_id`. What the deliveries share is the
message itself, so the key is `(channel, ts)`.

The database decides: the key is INSERTed into a table with a unique constraint, and only the
process whose insert succeeds answers, whichever replica the retry reached. A per-process cache
answers repeats without a round trip. When the database is down the cache alone decides: the
user still gets an answer (one per replica at worst), which beats silence during an outage.
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


def message_key(channel: str, ts: str) -> str:
    return f"msg:{channel}:{ts}"


class Dedup:
    """`claim(key)` is True exactly once per key."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._last_prune = 0.0

    def _remember(self, key: str) -> bool:
        """False if this process already saw `key`."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            while len(self._seen) > LOCAL_KEYS:
                self._seen.popitem(last=False)
            return True

    def claim(self, key: str) -> bool:
        if not self._remember(key):
            metrics.DEDUP_HITS.inc("local")
            return False
        now = time.monotonic()
        prune = None
        if now - self._last_prune > PRUNE_EVERY_S:
            self._last_prune = now
            prune = datetime.now(UTC) - KEEP
        try:
            claimed = claim_event_key(key, prune_before=prune, settings=self._settings)
        except (StoreUnavailable, SchemaTooNew) as exc:
            log.warning("dedup: database unavailable (%s); this replica answers on its own",
                        type(exc).__name__)
            return True
        if not claimed:
            metrics.DEDUP_HITS.inc("database")
        return claimed
