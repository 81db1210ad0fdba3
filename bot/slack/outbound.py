"""Everything the bot sends to Slack, through one object: messages in a thread, their updates,
files, and messages only one person sees."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.slack.blocks import Reply

log = logging.getLogger(__name__)


class Pacer:
    """At most one new message per `interval_s` per channel (Slack allows about one a second
    in a channel and answers a burst with 429). A channel's posts take turns: each starts
    `interval_s` after the previous one finished, its 429 retries (the client waits
    Retry-After) included, so a burst in one channel goes out steadily instead of as a storm
    of rejected calls and retries."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._next: dict[str, float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def turn(self, channel: str) -> Iterator[None]:
        with self._lock:
            lock = self._locks.setdefault(channel, threading.Lock())
            if len(self._locks) > 10_000:  # forget channels quiet for a while
                now = time.monotonic()
                self._next = {c: t for c, t in self._next.items() if t > now}
                self._locks = {c: k for c, k in self._locks.items() if c in self._next}
                self._locks[channel] = lock
        with lock:
            wait = self._next.get(channel, 0.0) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                yield
            finally:
                self._next[channel] = time.monotonic() + self.interval_s


class Outbound:
    """Posts through the Web API client (its retries and error counting included), paced per
    channel. A reply too long for a message carries its whole text as a file in the same
    thread."""

    def __init__(self, client: WebClient, pace_s: float = 1.0) -> None:
        self.client = client
        self.pacer = Pacer(pace_s)

    def post(self, channel: str, thread: str, reply: Reply) -> str:
        """Post in the thread; the new message's ts."""
        with self.pacer.turn(channel):
            resp = self.client.chat_postMessage(channel=channel, thread_ts=thread,
                                                text=reply.text, blocks=reply.blocks,
                                                unfurl_links=False, unfurl_media=False)
        self._attach(channel, thread, reply)
        return str(resp["ts"])

    def update(self, channel: str, ts: str, thread: str, reply: Reply) -> None:
        """Replace message `ts` (a "Looking at ..." placeholder) with `reply`."""
        self.client.chat_update(channel=channel, ts=ts, text=reply.text, blocks=reply.blocks)
        self._attach(channel, thread, reply)

    def edit(self, channel: str, ts: str, reply: Reply) -> None:
        """Redraw message `ts` (an answer expanded, collapsed or marked fixed): no file."""
        with self.pacer.turn(channel):
            self.client.chat_update(channel=channel, ts=ts, text=reply.text,
                                    blocks=reply.blocks)

    def replace(self, response_url: str, reply: Reply) -> None:
        """Redraw the message a click came from through the click's response_url: the one
        way to edit a slash command's answer, which was posted through a response_url too."""
        from slack_sdk.webhook import WebhookClient

        try:
            result = WebhookClient(response_url).send(text=reply.text, blocks=reply.blocks,
                                                      replace_original=True)
        except OSError as exc:  # Slack unreachable: the answer stays as it was
            log.warning("redraw through response_url failed: %s", type(exc).__name__)
            return
        if result.status_code != 200:
            log.warning("redraw through response_url failed: HTTP %s", result.status_code)

    def permalink(self, channel: str, ts: str) -> str | None:
        """The message's permalink (None when Slack does not give one)."""
        try:
            link = self.client.chat_getPermalink(channel=channel, message_ts=ts).get("permalink")
        except SlackApiError as exc:
            log.warning("no permalink: %s", exc.response.get("error"))
            return None
        return str(link) if link else None

    def delete(self, channel: str, ts: str) -> None:
        """Remove message `ts` (a placeholder another replica's answer made redundant)."""
        try:
            self.client.chat_delete(channel=channel, ts=ts)
        except SlackApiError as exc:
            log.warning("delete of a placeholder failed: %s", exc.response.get("error"))

    def _attach(self, channel: str, thread: str, reply: Reply) -> None:
        if reply.attachment:
            self.upload(channel, thread, reply.attachment.encode(), reply.attachment_name,
                        "The full answer")

    def upload(self, channel: str, thread: str, content: bytes, filename: str,
               title: str, comment: str | None = None) -> None:
        """files.getUploadURLExternal -> POST the bytes -> files.completeUploadExternal
        (channel_id + thread_ts), which is what files_upload_v2 does. A failed upload is
        logged: the answer it belongs to is already posted.

        Slack's one-a-second-per-channel pace is chat.postMessage's; the upload methods are
        limited per workspace (Tier 4). A `comment` is posted as a message in the channel,
        so an upload with one (a chart's sentence) takes the channel's turn; a bare file (the
        whole answer, right after it) does not, and the channel's next placeholder does not
        wait a second behind it."""
        turn = self.pacer.turn(channel) if comment else contextlib.nullcontext()
        try:
            with turn:
                self.client.files_upload_v2(channel=channel, thread_ts=thread,
                                            content=content, filename=filename, title=title,
                                            initial_comment=comment)
        except SlackApiError as exc:
            log.warning("upload of %s failed: %s", filename, exc.response.get("error"))

    def ephemeral(self, channel: str, user: str, thread: str | None, text: str) -> None:
        """A message only `user` sees (refusals, and what only they asked about)."""
        self.client.chat_postEphemeral(channel=channel, user=user, text=text,
                                       thread_ts=thread)
