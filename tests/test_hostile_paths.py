"""No secret and no terminal control character leaves inferbot, whichever way out: the
terminal answer, `--json`, `history --json`, the database, the spool, a Slack reply, the
server's log. (The `check` path, text collected from a remote host, is in
tests/collect/test_hostile_host.py.)"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest

from tests.canaries import leaked
from tests.fixtures.slack import serve_env, serve_process
from tests.hostile import HOSTILE_LINE, PASTE, controls
from tests.slack.fakes import FakeSlack
from tests.slack.test_http import all_text, mention
from tests.test_cli_store import TITLE, run


def sqlite_text(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return "\n".join(conn.iterdump())


def clean(where: str, text: str) -> None:
    assert leaked(text) == [], f"secrets in {where}"
    assert controls(text) == [], f"control characters in {where}"


def test_the_paste_would_show_its_secrets_unredacted() -> None:
    """The canaries sit on the line the answer quotes: without redaction they would leak."""
    from bot.diagnose import diagnose
    from bot.kb.loader import load_kb
    from bot.schema import Evidence, to_json

    out = to_json(diagnose(Evidence(text=PASTE), load_kb()))
    assert "[REDACTED]" in out and "[REDACTED] (private key)" in out
    assert HOSTILE_LINE[:60] in out
    clean("the diagnosis", out)


@pytest.mark.slow
def test_cli_json_text_history_and_database(tmp_path: Path) -> None:
    paste = tmp_path / "paste.log"
    paste.write_text(PASTE)
    as_json = run(tmp_path, "diagnose", str(paste), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["problems"][0]["id"] == "max-model-len-exceeds-kv-cache"
    as_text = run(tmp_path, "diagnose", str(paste))
    history = run(tmp_path, "history", "--json")
    for where, text in [("--json", as_json.stdout), ("the terminal", as_text.stdout),
                        ("history", history.stdout), ("stderr", as_json.stderr + as_text.stderr),
                        ("the database", sqlite_text(tmp_path / "incidents.db"))]:
        clean(where, text)


@pytest.mark.slow
def test_spool(tmp_path: Path) -> None:
    paste = tmp_path / "paste.log"
    paste.write_text(PASTE)
    down = "postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2"
    r = run(tmp_path, "diagnose", str(paste), db=down)
    assert r.returncode == 0
    spooled = list((tmp_path / "spool").glob("*.json"))
    assert spooled
    for path in spooled:
        clean("the spool", path.read_text())
    clean("stderr", r.stderr)


@pytest.mark.slow
@pytest.mark.slack
def test_slack_reply_and_the_servers_log(fake: FakeSlack, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    env = serve_env(fake, tmp_path, INFERBOT_LOG_LEVEL="DEBUG")
    with serve_process(env, fake, stderr=log) as (endpoint, _):
        assert endpoint.event(mention(f"prod is down\n```{PASTE}```"))[0] == 200
        # unsigned, and signed with a wrong secret: refused, and their bodies never logged
        body = json.dumps(mention(PASTE, event_id="Ev0UNSIGNED1")).encode()
        req = urllib.request.Request(endpoint.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(req, timeout=10)
        assert endpoint.event(mention(PASTE, event_id="Ev0WRONGSIG1"), secret="x")[0] == 401
        answer = fake.recorder.wait_for("chat.update", timeout=30)[0].args
        assert TITLE in all_text(answer)
        fake.recorder.settle()
        time.sleep(0.2)
    uploads = [c.raw for c in fake.recorder.of("upload")]
    assert any(TITLE.encode() in raw for raw in uploads)  # the whole answer, as a file
    for call in fake.recorder.calls:
        raw = b"" if call.raw.startswith(b"\x89PNG") else call.raw  # a chart's bytes
        clean(f"Slack {call.method}", json.dumps(call.args) + raw.decode("utf-8", "replace"))
    text = log.read_text()
    assert "refused request: invalid or stale request signature (" in text
    clean("the server's log", text)
    clean("the server's database", sqlite_text(tmp_path / "db.sqlite"))
