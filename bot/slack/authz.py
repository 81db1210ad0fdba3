"""Who may trigger collection from hosts (a `check HOST` or a "Collect from HOST" click).

Configuration (Settings): `allowed_users` and `allowed_usergroups` say who, `allowed_channels`
(when set) says where. A user is allowed when listed, or a member of a listed user group
(`usergroups.users.list`, cached for a few minutes: the method is Tier 2), and the request comes
from an allowed channel. Nothing configured means nobody: collection runs commands on hosts, so
it is opt-in. The user id always comes from the signed payload, never from text, and the check
runs again on every click, since a button stays clickable for anyone who can see the message.
"""

from __future__ import annotations

import logging
import threading
import time

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.config import Settings

log = logging.getLogger(__name__)

GROUP_CACHE_S = 300.0


class Authorizer:
    def __init__(self, settings: Settings, client: WebClient) -> None:
        self._users = frozenset(settings.allowed_users)
        self._groups = tuple(settings.allowed_usergroups)
        self._channels = frozenset(settings.allowed_channels)
        self._client = client
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def _members(self, group: str) -> frozenset[str]:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(group)
        if cached and now - cached[0] < GROUP_CACHE_S:
            return cached[1]
        try:
            users = self._client.usergroups_users_list(usergroup=group)["users"]
            members = frozenset(str(u) for u in users)
        except SlackApiError as exc:  # kept (or empty) for a while too: Tier 2 limits
            log.warning("usergroups.users.list %s failed: %s", group, exc.response.get("error"))
            members = cached[1] if cached else frozenset()
        with self._lock:
            self._cache[group] = (now, members)
        return members

    def may_collect(self, user: str, channel: str | None) -> bool:
        if self._channels and channel not in self._channels:
            return False
        if not self._users and not self._groups:
            return bool(self._channels)
        if user in self._users:
            return True
        return any(user in self._members(g) for g in self._groups)

    def who_can(self) -> str:
        """The refusal's second half: who may, in Slack's mention syntax."""
        who = [f"<@{u}>" for u in sorted(self._users)]
        who += [f"<!subteam^{g}>" for g in self._groups]
        where = ", ".join(f"<#{c}>" for c in sorted(self._channels))
        if not who and not where:
            return ("Nobody is allowed to collect yet: an admin sets INFERBOT_ALLOWED_USERS, "
                    "INFERBOT_ALLOWED_USERGROUPS or INFERBOT_ALLOWED_CHANNELS.")
        people = ", ".join(who) if who else "anyone"
        return f"Collection is allowed for {people}" + (f" in {where}." if where else ".")
