"""Snippet files: long pastes arrive as files, and only their first lines ride in the event.

The content is fetched from `url_private_download` with the bot token as a bearer header (scope
`files:read`). Slack answers a request without a valid token with 200 and an HTML sign-in page,
so the status alone proves nothing: the content type and first bytes are checked too. Bounded:
at most `max_bytes` are read, only text is accepted, and the token is sent only to Slack's file
hosts (or the configured API host, for tests and proxies), never across a redirect elsewhere.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

TIMEOUT_S = 15.0
MAX_REDIRECTS = 3
MAX_FILES = 5  # per message
# Snippet and plain-text types; a log uploaded as a file has one of these too.
TEXT_FILETYPES = frozenset({"text", "log", "python", "shell", "json", "yaml", "csv", "markdown",
                            "diff", "javascript", "xml", "toml", "ini", "dockerfile", "sql"})
_HTML_STARTS = (b"<!doctype html", b"<html")


class SlackFile(BaseModel):
    """The fields of an event's file object that decide whether and how to fetch it."""

    model_config = ConfigDict(extra="ignore")

    id: str
    name: str = ""
    mode: str | None = None
    filetype: str | None = None
    mimetype: str | None = None
    size: int | None = None
    url_private: str | None = None
    url_private_download: str | None = None
    file_access: str | None = None

    @property
    def url(self) -> str | None:
        return self.url_private_download or self.url_private

    @property
    def is_text(self) -> bool:
        if self.mode == "snippet" or (self.filetype or "") in TEXT_FILETYPES:
            return True
        return (self.mimetype or "").startswith("text/")


class Fetched(BaseModel):
    """What came of one file: its text, or a one-line reason it was not read."""

    model_config = ConfigDict(extra="forbid")

    name: str
    text: str = ""
    truncated: bool = False
    skipped: str | None = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed by `fetch` itself, which decides where the token may go."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def token_may_go_to(url: str, api_url: str | None) -> bool:
    """The bearer token is sent only to Slack's hosts or to the configured API host."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if api_url:
        api = urlsplit(api_url)
        if parts.scheme == api.scheme and host == (api.hostname or "").lower():
            return True
    return parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com"))


def resolve_file(raw: dict[str, Any], client: WebClient) -> SlackFile:
    """The event's file object, completed with `files.info` when it carries no URL
    (Slack Connect and other restricted files arrive as `{"id", "file_access": ...}`)."""
    file = SlackFile.model_validate(raw)
    if file.url is None or file.file_access == "check_file_info":
        info = client.files_info(file=file.id)
        file = SlackFile.model_validate(info["file"])
    return file


def fetch(file: SlackFile, token: str, max_bytes: int, api_url: str | None) -> Fetched:
    """Download one text file with the bot token, at most `max_bytes` of it."""
    name = file.name or file.id
    if not file.is_text:
        return Fetched(name=name, skipped=f"{name} is not a text file ({file.filetype or '?'})")
    url = file.url
    for _ in range(MAX_REDIRECTS + 1):
        if url is None or not token_may_go_to(url, api_url):
            return Fetched(name=name, skipped=f"{name}: not a Slack file URL, not fetched")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with _OPENER.open(request, timeout=TIMEOUT_S) as response:
                content_type = response.headers.get("Content-Type", "")
                data = response.read(max_bytes + 1)
        except urllib.error.HTTPError as exc:
            if exc.code in (301, 302, 303, 307, 308) and exc.headers.get("Location"):
                url = urljoin(url, exc.headers["Location"])
                continue
            return Fetched(name=name, skipped=f"{name}: download failed (HTTP {exc.code})")
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return Fetched(name=name, skipped=f"{name}: download failed ({type(reason).__name__})")
        return _decode(name, content_type, data, max_bytes)
    return Fetched(name=name, skipped=f"{name}: too many redirects")


def _decode(name: str, content_type: str, data: bytes, max_bytes: int) -> Fetched:
    head = data[:64].lstrip().lower()
    if content_type.startswith("text/html") and head.startswith(_HTML_STARTS):
        return Fetched(name=name, skipped=f"{name}: Slack sent a sign-in page instead of the "
                                          "file (the bot token lacks files:read?)")
    if b"\x00" in data[:8192]:
        return Fetched(name=name, skipped=f"{name} looks binary, not a text log")
    truncated = len(data) > max_bytes
    text = data[:max_bytes].decode("utf-8", errors="replace")
    return Fetched(name=name, text=text, truncated=truncated)


def download_all(raw_files: list[dict[str, Any]], client: WebClient, token: str,
                 max_bytes: int, api_url: str | None) -> list[Fetched]:
    """The files of a message (the first MAX_FILES), each bounded; one that cannot be read
    says why."""
    out: list[Fetched] = []
    for raw in raw_files[:MAX_FILES]:
        try:
            file = resolve_file(raw, client)
        except (SlackApiError, ValueError) as exc:
            error = exc.response.get("error") if isinstance(exc, SlackApiError) else "bad file"
            out.append(Fetched(name=str(raw.get("id", "?")),
                               skipped=f"file {raw.get('id', '?')}: files.info failed ({error})"))
            continue
        out.append(fetch(file, token, max_bytes, api_url))
    return out
