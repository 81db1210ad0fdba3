"""Everything the bot sends to Slack, through one object: messages in a thread, their updates,
files, and messages only one person sees."""

from __future__ import annotations

import logging

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.slack.blocks import Reply

log = logging.getLogger(__name__)


class Outbound:
    """Posts through the Web API client (its retries and error counting included). A reply too
    long for a message carries its whole text as a file in the same thread."""

    def __init__(self, client: WebClient) -> None:
        self.client = client

    def post(self, channel: str, thread: str, reply: Reply) -> str:
        """Post in the thread; the new message's ts."""
        resp = self.client.chat_postMessage(channel=channel, thread_ts=thread, text=reply.text,
                                            blocks=reply.blocks, unfurl_links=False,
                                            unfurl_media=False)
        self._attach(channel, thread, reply)
        return str(resp["ts"])

    def update(self, channel: str, ts: str, thread: str, reply: Reply) -> None:
        """Replace message `ts` (a "Looking at ..." placeholder) with `reply`."""
        self.client.chat_update(channel=channel, ts=ts, text=reply.text, blocks=reply.blocks)
        self._attach(channel, thread, reply)

    def edit(self, channel: str, ts: str, reply: Reply) -> None:
        """Redraw message `ts` (an answer expanded, collapsed or marked fixed): no file."""
        self.client.chat_update(channel=channel, ts=ts, text=reply.text, blocks=reply.blocks)

    def permalink(self, channel: str, ts: str) -> str | None:
        """The message's permalink (None when Slack does not give one)."""
        try:
            link = self.client.chat_getPermalink(channel=channel, message_ts=ts).get("permalink")
        except SlackApiError as exc:
            log.warning("no permalink: %s", exc.response.get("error"))
            return None
        return str(link) if link else None

    def _attach(self, channel: str, thread: str, reply: Reply) -> None:
        if reply.attachment:
            self.upload(channel, thread, reply.attachment.encode(), reply.attachment_name,
                        "The full answer")

    def upload(self, channel: str, thread: str, content: bytes, filename: str,
               title: str, comment: str | None = None) -> None:
        """files.getUploadURLExternal -> POST the bytes -> files.completeUploadExternal
        (channel_id + thread_ts), which is what files_upload_v2 does. A failed upload is
        logged: the answer it belongs to is already posted."""
        try:
            self.client.files_upload_v2(channel=channel, thread_ts=thread, content=content,
                                        filename=filename, title=title,
                                        initial_comment=comment)
        except SlackApiError as exc:
            log.warning("upload of %s failed: %s", filename, exc.response.get("error"))

    def ephemeral(self, channel: str, user: str, thread: str | None, text: str) -> None:
        """A message only `user` sees (refusals, and what only they asked about)."""
        self.client.chat_postEphemeral(channel=channel, user=user, text=text,
                                       thread_ts=thread)
