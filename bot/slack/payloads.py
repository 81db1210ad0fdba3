"""What the listeners read from Slack's payloads, validated at the boundary.

Only the fields the bot uses, each with its shape: Slack ids (`U0123`, `C0123`, `W0123`),
message timestamps (`1717171717.000200`). Payloads are signed by Slack, but button values and
modal metadata echo what the bot once wrote and are re-checked by their handlers all the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ID = r"^[A-Z0-9]{2,30}$"
TS = r"^\d{1,12}\.\d{1,8}$"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class MessageEvent(_Payload):
    """An `app_mention` or `message` event: what the answer needs from it."""

    channel: str = Field(pattern=ID)
    user: str | None = Field(default=None, pattern=ID)
    ts: str = Field(pattern=TS)
    thread_ts: str | None = Field(default=None, pattern=TS)
    text: str = ""
    files: list[dict[str, Any]] = Field(default_factory=list)
    channel_type: str | None = None
    subtype: str | None = None
    bot_id: str | None = None

    @property
    def thread(self) -> str:
        """Replies go to the thread's parent: never a reply's own ts."""
        return self.thread_ts or self.ts


class CommandBody(_Payload):
    text: str = ""
    user_id: str = Field(pattern=ID)
    channel_id: str = Field(pattern=ID)


class _Id(_Payload):
    id: str = Field(pattern=ID)


class _Container(_Payload):
    message_ts: str | None = Field(default=None, pattern=TS)
    thread_ts: str | None = Field(default=None, pattern=TS)


class _Option(_Payload):
    value: str = Field(default="", max_length=2000)


class _Action(_Payload):
    action_id: str
    value: str = Field(default="", max_length=2000)
    selected_option: _Option | None = None  # a menu's choice (static_select)


class ActionBody(_Payload):
    """A button click or a menu choice. `value` is untrusted: each handler parses it
    strictly."""

    user: _Id
    channel: _Id | None = None
    container: _Container = _Container()
    actions: list[_Action] = Field(min_length=1)
    trigger_id: str | None = None
    # where Slack takes a reply to this click: the way to redraw a slash command's answer,
    # which was itself posted through a response_url
    response_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")

    @property
    def value(self) -> str:
        """The button's value, or the chosen option's."""
        action = self.actions[0]
        return action.selected_option.value if action.selected_option else action.value

    @property
    def thread(self) -> str | None:
        return self.container.thread_ts or self.container.message_ts


class FeedbackMeta(_Payload):
    """The modal's private_metadata, written by `blocks.feedback_modal` (re-validated)."""

    incident_id: int = Field(ge=1)
    channel: str = Field(pattern=ID)
    thread: str = Field(pattern=TS)


class HomeEvent(_Payload):
    user: str = Field(pattern=ID)
    tab: str = "home"
