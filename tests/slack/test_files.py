"""Snippet download: the bearer token goes only to Slack's hosts, bounded, text only."""

from __future__ import annotations

import pytest

from bot.slack.files import SlackFile, fetch, token_may_go_to
from tests.slack.fakes import BOT_TOKEN, FakeSlack


@pytest.mark.parametrize(("url", "ok"), [
    ("https://files.slack.com/files-pri/T-F/x", True),
    ("https://slack.com/x", True),
    ("http://files.slack.com/files-pri/T-F/x", False),  # never in clear text
    ("https://files.slack.com.evil.example/x", False),
    ("https://evilslack.com/x", False),
    ("http://127.0.0.1:8/api-host/x", True),  # the configured API host (tests, proxies)
    ("http://127.0.0.2:8/x", False),
])
def test_where_the_token_may_go(url: str, ok: bool) -> None:
    assert token_may_go_to(url, "http://127.0.0.1:8/api/") is ok


def snippet(url: str) -> SlackFile:
    return SlackFile(id="F0X", name="log.txt", mode="snippet", url_private_download=url)


def test_a_redirect_elsewhere_is_not_followed_with_the_token(fake: FakeSlack) -> None:
    url = f"{fake.base}/files-redirect/?to=http://127.0.0.2:{fake.port}/steal"
    got = fetch(snippet(url), BOT_TOKEN, 1024, fake.api_url)
    assert got.skipped and "not a Slack file URL" in got.skipped
    assert [c.method for c in fake.recorder.calls] == ["file.redirect"]


def test_a_redirect_on_the_same_host_is_followed(fake: FakeSlack) -> None:
    fake.files["F0X"] = b"ValueError: boom\n"
    url = f"{fake.base}/files-redirect/?to={fake.file_url('F0X')}"
    got = fetch(snippet(url), BOT_TOKEN, 1024, fake.api_url)
    assert got.text == "ValueError: boom\n"
    assert fake.recorder.of("file.download")[0].auth == f"Bearer {BOT_TOKEN}"


def test_size_is_bounded_and_binary_is_refused(fake: FakeSlack) -> None:
    fake.files["F0X"] = b"x" * 5000
    got = fetch(snippet(fake.file_url("F0X")), BOT_TOKEN, 1024, fake.api_url)
    assert got.truncated and len(got.text) == 1024
    fake.files["F0X"] = b"\x7fELF\x00\x00binary"
    assert "binary" in (fetch(snippet(fake.file_url("F0X")), BOT_TOKEN, 1024,
                              fake.api_url).skipped or "")


def test_an_image_is_not_downloaded(fake: FakeSlack) -> None:
    image = SlackFile(id="F0P", name="a.png", filetype="png", mimetype="image/png",
                      url_private_download=fake.file_url("F0P"))
    assert "not a text file" in (fetch(image, BOT_TOKEN, 1024, fake.api_url).skipped or "")
    assert fake.recorder.calls == []
