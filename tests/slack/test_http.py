"""The real Bolt HTTP endpoint with signed requests, against the fake Slack Web API."""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from tests.fixtures.slack import ALLOWED, Endpoint, make_settings, serving
from tests.slack.fakes import BOT_TOKEN, FakeSlack, load

pytestmark = pytest.mark.slack

BOT = "U0BOT00001"
THREAD = "1717171717.000200"
VLLM_ERROR = (
    "INFO 11-30 06:03:16 [gpu_worker.py:227] Available KV cache memory: 9.97 GiB\n"
    "ERROR 11-30 06:03:16 [core.py:586] ValueError: To serve at least one request with the "
    "model's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (9.97 GiB). Based on the available memory, the estimated maximum "
    "model length is 77824. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)

# The first fix, as a change: the paste shows no command line, so the flag to set, with its
# current value from the error and a length that leaves room for two requests.
CHANGE = "--max-model-len 131072 -&gt; 32768"


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mention(text: str, *, ts: str = "1717171800.000100", event_id: str = "Ev0MENTION001",
            thread_ts: str | None = None, files: list[dict[str, Any]] | None = None,
            kind: str = "app_mention") -> dict[str, Any]:
    payload = copy.deepcopy(load("app_mention_code_block.json"))
    event = payload["event"]
    event.update(type=kind, text=f"<@{BOT}> {escape(text)}", ts=ts, event_ts=ts)
    event.pop("blocks")
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files is not None:
        event["files"] = files
    if kind == "message":
        event["channel_type"] = "channel"
    payload["event_id"] = event_id
    return payload


def blocks_of(call_args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = call_args.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def all_text(call_args: dict[str, Any]) -> str:
    return json.dumps(blocks_of(call_args)) + str(call_args.get("text", ""))


def file_upload(fake: FakeSlack, name: str) -> dict[str, Any]:
    """The bytes and completion of the file `name` uploaded into a thread."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for step1 in fake.recorder.of("files.getUploadURLExternal"):
            if step1.args["filename"] != name:
                continue
            file_id = step1.response["file_id"]
            posted = [c for c in fake.recorder.of("upload") if c.args["path"].endswith(file_id)]
            done = [c for c in fake.recorder.of("files.completeUploadExternal")
                    if json.loads(c.args["files"])[0]["id"] == file_id]
            if posted and done:
                assert int(step1.args["length"]) == len(posted[0].raw)
                return {"content": posted[0].raw, "auth": posted[0].auth,
                        "complete": done[0].args}
        time.sleep(0.05)
    raise AssertionError(f"no upload of {name}")


def chart_upload(fake: FakeSlack) -> dict[str, Any]:
    """The three steps of the chart's upload, matched by file id."""
    up = file_upload(fake, "memory-budget.png")
    return {"png": up["content"], "upload_auth": up["auth"], "complete": up["complete"]}


def final_answer(fake: FakeSlack, count: int = 1) -> dict[str, Any]:
    return fake.recorder.wait_for("chat.update", count, timeout=30)[count - 1].args


def reply_in(fake: FakeSlack, thread_ts: str, timeout: float = 30) -> dict[str, Any]:
    """What the bot's "Looking…" message in thread `thread_ts` was replaced with."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        posted = {c.response.get("ts") for c in fake.recorder.of("chat.postMessage")
                  if c.args.get("thread_ts") == thread_ts}
        for call in fake.recorder.of("chat.update"):
            if call.args.get("ts") in posted:
                return call.args
        time.sleep(0.02)
    raise AssertionError(f"no reply in thread {thread_ts}")


# --------------------------------------------------------------------------- transport


def test_url_verification(endpoint: Endpoint) -> None:
    status, body, _ = endpoint.event(load("url_verification.json"))
    assert status == 200
    assert json.loads(body) == {"challenge": load("url_verification.json")["challenge"]}


@pytest.mark.slow
def test_bad_signature_and_stale_timestamp_are_401_and_nothing_is_posted(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    payload = mention("help")
    assert endpoint.event(payload, secret="not-the-secret")[0] == 401
    assert endpoint.event(payload, ts=int(time.time()) - 301)[0] == 401
    time.sleep(0.5)
    assert fake.posts() == []


def test_mention_with_a_fenced_vllm_error_gets_the_answer_in_the_thread(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    status, _, elapsed = endpoint.event(mention(f"prod is down\n```{VLLM_ERROR}```"))
    assert status == 200 and elapsed < 3
    looking = fake.recorder.wait_for("chat.postMessage")[0].args
    assert looking["thread_ts"] == "1717171800.000100" and looking["channel"] == "C0INCIDENT1"
    answer = final_answer(fake)
    assert answer["ts"] == "1717180000.000001"  # the "looking" message, updated in place
    text = all_text(answer)
    assert "needs more KV cache than the GPU has left" in text
    assert "max-model-len-exceeds-kv-cache" not in text  # no internal ids
    assert CHANGE in text
    assert "first time seen" in text
    # the whole answer is a file in the thread, beside the chart
    full = file_upload(fake, "diagnosis.txt")
    words = b" ".join(full["content"].split())
    assert b"77,824 is the edge" in words and b"How to confirm" in words
    # the file: files.getUploadURLExternal -> POST bytes -> completeUploadExternal in thread
    assert full["complete"]["channel_id"] == "C0INCIDENT1"
    assert full["complete"]["thread_ts"] == "1717171800.000100"
    methods = [c.method for c in fake.recorder.calls]
    assert methods.index("chat.update") < methods.index("files.completeUploadExternal")
    # no chart: the paste gives no weights or budget, so a chart would tell nothing
    fake.recorder.settle()
    names = [c.args["filename"] for c in fake.recorder.of("files.getUploadURLExternal")]
    assert names == ["diagnosis.txt"]
    assert len(fake.posts()) == 1


def test_snippet_is_downloaded_with_the_bearer_token_and_diagnosed(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    snippet = load("app_mention_with_snippet_file.json")
    file = snippet["event"]["files"][0]
    file["url_private_download"] = fake.file_url(file["id"])
    fake.files[file["id"]] = ("x\n" * 500 + VLLM_ERROR + "\n").encode()
    status, _, _ = endpoint.event(snippet)
    assert status == 200
    answer = final_answer(fake)
    assert CHANGE in all_text(answer)
    download = fake.recorder.of("file.download")[0]
    assert download.auth == f"Bearer {BOT_TOKEN}"
    assert fake.posts()[0].args["thread_ts"] == THREAD  # the parent, not the reply's ts


def test_a_file_without_url_is_looked_up_with_files_info(endpoint: Endpoint,
                                                         fake: FakeSlack) -> None:
    fake.files["F0SECRET01"] = VLLM_ERROR.encode()
    endpoint.event(mention("", files=[{"id": "F0SECRET01", "file_access": "check_file_info"}]))
    answer = final_answer(fake)
    assert fake.recorder.of("files.info")[0].args["file"] == "F0SECRET01"
    assert CHANGE in all_text(answer)


def test_a_sign_in_page_is_not_diagnosed(fake: FakeSlack, tmp_path: Path) -> None:
    with serving(make_settings(fake, tmp_path, INFERBOT_BOT_TOKEN="xoxb-other"), fake) as ep:
        ep.event(mention("", files=[{"id": "F0X", "mode": "snippet",
                                      "url_private_download": fake.file_url("F0X")}]))
        answer = final_answer(fake)
        assert "sign-in page" in all_text(answer)


@pytest.mark.slow
def test_a_retry_and_a_double_delivery_get_exactly_one_reply(endpoint: Endpoint,
                                                             fake: FakeSlack) -> None:
    first = mention("help")
    assert endpoint.event(first)[0] == 200
    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert endpoint.event(first, headers=retry)[0] == 200
    as_message = mention("help", kind="message", event_id="Ev0MESSAGE002")
    assert endpoint.event(as_message)[0] == 200
    fake.recorder.wait_for("chat.postMessage")
    time.sleep(1.0)
    assert len(fake.posts()) == 1


@pytest.mark.slow
def test_dedup_holds_across_replicas(fake: FakeSlack, settings: Settings) -> None:
    """Two endpoints on one database: the retry lands on the other replica, no second reply."""
    with serving(settings, fake) as one, serving(settings, fake) as two:
        assert one.event(mention("help"))[0] == 200
        fake.recorder.wait_for("chat.postMessage")
        assert two.event(mention("help"), headers={"X-Slack-Retry-Num": "1"})[0] == 200
        time.sleep(1.0)
        assert len(fake.posts()) == 1


@pytest.mark.slow
def test_429_is_retried_after_retry_after(endpoint: Endpoint, fake: FakeSlack) -> None:
    fake.fail_next["chat.postMessage"] = 1
    endpoint.event(mention("help"))
    fake.recorder.wait_for("chat.postMessage", timeout=10)
    limited = fake.recorder.of("chat.postMessage#429")
    assert len(limited) == 1 and len(fake.posts()) == 1


def test_a_database_outage_still_gets_a_reply(fake: FakeSlack, tmp_path: Path) -> None:
    down = make_settings(fake, tmp_path, database_url="postgresql://u:p@127.0.0.1:9/none")
    with serving(down, fake) as ep:
        ep.event(mention(f"```{VLLM_ERROR}```"))
        text = all_text(final_answer(fake))
        assert CHANGE in text
        assert "incident store is down" in text
        assert list((tmp_path / "spool").glob("*.json"))  # kept for later


# --------------------------------------------------------------------------- words


def test_history_is_answered(endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention(f"```{VLLM_ERROR}```"))
    final_answer(fake)
    fake.recorder.wait_for("chat.getPermalink")  # stored right after the answer is shown
    fake.recorder.settle()
    endpoint.event(mention("history max-model-len-exceeds-kv-cache", ts="1717171900.000100"))
    text = all_text(reply_in(fake, "1717171900.000100"))
    assert "History" in text and "needs more KV cache than the GPU has left" in text
    assert f"open; seen 1x; in C0INCIDENT1 by {ALLOWED}; https://example.slack.com/archives/" \
        in text


def test_size_is_answered(endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention("size meta-llama/Llama-3.1-8B-Instruct on H100"))
    text = all_text(fake.recorder.wait_for("chat.postMessage")[0].args)
    assert "Sizing" in text and "H100" in text
    chart = chart_upload(fake)
    assert chart["png"].startswith(b"\x89PNG\r\n\x1a\n") and chart["upload_auth"] == ""
    assert chart["complete"]["thread_ts"]
    assert "GiB of KV cache" in chart["complete"]["initial_comment"]  # its one sentence


@pytest.mark.slow
def test_size_takes_loose_names_and_offers_close_matches_not_a_config_file(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention("size llama 8b on a10"))
    text = all_text(fake.recorder.wait_for("chat.postMessage")[0].args)
    assert "Llama-3.1-8B" in text and "A10" in text
    endpoint.event(mention("size lama-3.1-8b-instruct on H100", ts="1717171900.000100",
                           event_id="Ev0SIZE2"))
    offer = fake.recorder.wait_for("chat.postMessage", 2)[1].args
    shown = all_text(offer)
    assert "pass a config.json" not in shown and "paste the model's config.json" in shown
    pick = element(blocks_of(offer), "size_pick")
    assert pick["type"] == "button" and pick["value"].startswith("meta-llama/Llama-3.1-8B")
    assert pick["value"].endswith(" on H100")
    menu = [e for b in blocks_of(offer) if b["type"] == "actions" for e in b["elements"]
            if e["type"] == "static_select"]
    assert menu and len(menu[0]["options"]) > 5
    endpoint.interaction(click("size_pick", pick["value"]))
    sized = all_text(fake.recorder.wait_for("chat.postMessage", 3)[2].args)
    assert "Sizing" in sized and "H100" in sized


def test_bad_words_get_usage_not_silence(endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention("size llama"))
    assert "usage" in all_text(fake.recorder.wait_for("chat.postMessage")[0].args)


def test_slash_command_answers_through_response_url(endpoint: Endpoint,
                                                    fake: FakeSlack) -> None:
    fields = load("slash_command.json")
    fields.update(command="/inferbot", text="help", response_url=fake.response_url())
    status, _, elapsed = endpoint.command(fields)
    assert status == 200 and elapsed < 3
    reply = fake.recorder.wait_for("response_url")[0].args
    assert reply["response_type"] == "ephemeral" and "history" in all_text(reply)


def test_check_by_someone_not_allowed_is_refused_with_who_can(endpoint: Endpoint,
                                                              fake: FakeSlack) -> None:
    payload = mention("check gpu-07")
    payload["event"]["user"] = "U0MALLORY1"
    endpoint.event(payload)
    refusal = fake.recorder.wait_for("chat.postEphemeral")[0].args
    assert refusal["user"] == "U0MALLORY1" and f"<@{ALLOWED}>" in refusal["text"]
    assert fake.posts() == []


def test_chat_never_checks_the_bot_s_own_machine(fake: FakeSlack, tmp_path: Path) -> None:
    # the terminal's operator setting does not open this machine to chat
    with serving(make_settings(fake, tmp_path, allow_localhost=True), fake) as ep:
        ep.event(mention("check localhost"))
        text = all_text(final_answer(fake))
    assert "refused 'localhost'" in text and "not from chat" in text


def test_a_host_limited_to_other_channels_is_refused_here(
        fake: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(json.dumps({
        "known_hosts": str(tmp_path / "known_hosts"), "ssh_config": str(tmp_path / "none"),
        "hosts": [{"name": "gpu-07", "address": "127.0.0.1", "port": 9, "user": "ops",
                   "channels": ["C0ELSEWHERE"]}]}))
    monkeypatch.setenv("INFERBOT_INVENTORY", str(hosts))
    with serving(make_settings(fake, tmp_path), fake) as ep:
        ep.event(mention("check gpu-07"))  # asked in C0INCIDENT1
        text = all_text(final_answer(fake))
    assert "refused 'gpu-07': not allowed from this channel" in text


# --------------------------------------------------------------------------- clicks


def click(action_id: str, value: str, user: str = ALLOWED) -> dict[str, Any]:
    body = copy.deepcopy(load("block_actions_button.json"))
    body["user"]["id"] = user
    body["actions"] = [{**body["actions"][0], "action_id": action_id, "value": value}]
    return body


def test_unauthorized_collect_click_is_refused(fake: FakeSlack, tmp_path: Path) -> None:
    s = make_settings(fake, tmp_path, allowed_users=[], allowed_usergroups=["S0ONCALL"])
    fake.usergroups["S0ONCALL"] = ["W0ONCALL002"]
    with serving(s, fake) as ep:
        status, _, elapsed = ep.interaction(click("collect_host", "db-03.prod",
                                                  user="U0MALLORY1"))
        assert status == 200 and elapsed < 3
        refusal = fake.recorder.wait_for("chat.postEphemeral")[0].args
        assert refusal["user"] == "U0MALLORY1"
        assert "<!subteam^S0ONCALL>" in refusal["text"]
        assert refusal["thread_ts"] == THREAD
        assert fake.recorder.of("usergroups.users.list")[0].args["usergroup"] == "S0ONCALL"
        assert fake.posts() == []


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-oProxyCommand=id", "a b", "x" * 300])
def test_a_forged_collect_value_is_refused_before_anything_runs(
        endpoint: Endpoint, fake: FakeSlack, value: str) -> None:
    assert endpoint.interaction(click("collect_host", value))[0] == 200
    time.sleep(0.5)
    assert [c.method for c in fake.recorder.calls if c.method != "auth.test"] == []


def choose(action_id: str, value: str, *, message_ts: str, user: str = ALLOWED
           ) -> dict[str, Any]:
    """A menu choice on the answer `message_ts` (the static_select "This fixed it")."""
    body = click(action_id, "", user)
    body["actions"] = [{"action_id": action_id, "type": "static_select",
                        "block_id": "incident_actions",
                        "selected_option": {"value": value,
                                            "text": {"type": "plain_text", "text": "1."}}}]
    return on(body, message_ts)


def on(body: dict[str, Any], message_ts: str) -> dict[str, Any]:
    """`body` as a click on the message `message_ts`."""
    body["container"]["message_ts"] = body["message"]["ts"] = message_ts
    return body


def element(answer: list[dict[str, Any]], action_id: str) -> dict[str, Any]:
    return next(e for b in answer if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == action_id)


def note_submission(fake: FakeSlack, note: str) -> dict[str, Any]:
    """`note` sent in the "Not right?" modal the bot opened."""
    view = fake.recorder.wait_for("views.open")[0].args["view"]
    view = json.loads(view) if isinstance(view, str) else view
    submission = copy.deepcopy(load("view_submission.json"))
    submission["view"].update(callback_id=view["callback_id"],
                              private_metadata=view["private_metadata"],
                              state={"values": {"note": {"note_input": {
                                  "type": "plain_text_input", "value": note}}}})
    return submission


@pytest.mark.slow
def test_this_fixed_it_is_one_menu_and_edits_the_answer(endpoint: Endpoint,
                                                        fake: FakeSlack) -> None:
    endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))
    posted = final_answer(fake)
    fake.recorder.wait_for("chat.getPermalink")  # where the fix will be linked from
    fake.recorder.settle()
    answer = blocks_of(posted)
    menu = element(answer, "fix_worked")
    assert menu["type"] == "static_select" and menu["placeholder"]["text"] == "This fixed it"
    first = menu["options"][0]["value"]
    incident = first.split(":")[0]
    endpoint.interaction(choose("fix_worked", f"{incident}:no-such-fix", message_ts=posted["ts"]))
    assert "has no fix" in fake.recorder.wait_for("chat.postEphemeral")[0].args["text"]
    elsewhere = choose("fix_worked", first, message_ts=posted["ts"])
    elsewhere["channel"]["id"] = "C0OTHER001"
    endpoint.interaction(elsewhere)
    assert "has no fix" in fake.recorder.wait_for("chat.postEphemeral", 2)[1].args["text"]
    endpoint.interaction(choose("fix_worked", first, message_ts=posted["ts"]))
    edited = final_answer(fake, 2)
    assert edited["ts"] == posted["ts"]  # the answer itself, not a new message
    text = all_text(edited)
    assert f"Fixed* by <@{ALLOWED}> with ```--max-model-len 32768```" in text
    # the buttons went, Details with them (the whole answer is the file posted with it)
    assert "fix_worked" not in text and "wrong_diagnosis" not in text
    assert not any(b["type"] == "actions" for b in blocks_of(edited))
    assert len(fake.posts()) == 1
    endpoint.event(mention(f"```{VLLM_ERROR}```", ts="1717172500.000100",
                           event_id="Ev0AGAIN"))
    again = all_text(final_answer(fake, 3))
    assert "seen 2 times in 1 day" in again
    # the fix's own thread, linked, as the second block of the next answer
    link = f"https://example.slack.com/archives/C0INCIDENT1/p{posted['ts'].replace('.', '')}"
    assert (f"last fixed just now by <@{ALLOWED}> with --max-model-len 32768 "
            f"(<{link}|thread>)") in again


@pytest.mark.slow
def test_details_expands_the_answer_in_place_and_less_folds_it(endpoint: Endpoint,
                                                               fake: FakeSlack) -> None:
    endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))
    posted = final_answer(fake)
    first = blocks_of(posted)
    endpoint.interaction(on(click("details", element(first, "details")["value"]), posted["ts"]))
    expanded = final_answer(fake, 2)
    assert expanded["ts"] == posted["ts"]
    shown = blocks_of(expanded)
    assert len(shown) > len(first) and shown[:len(first) - 1] == first[:-1]
    text = all_text(expanded)
    for title in ("The numbers", "Likely causes", "How to confirm", "Prevention"):
        assert title in text
    less = element(shown, "details")
    assert less["text"]["text"] == "Less"
    endpoint.interaction(on(click("details", less["value"]), posted["ts"]))
    assert blocks_of(final_answer(fake, 3)) == first
    # redrawing never uploads the file again
    fake.recorder.settle()
    names = [c.args["filename"] for c in fake.recorder.of("files.getUploadURLExternal")]
    assert names.count("diagnosis.txt") == 1


def test_not_right_opens_a_modal_stores_counts_and_shows_the_note(endpoint: Endpoint,
                                                                  fake: FakeSlack) -> None:
    from bot import metrics

    before = metrics.FEEDBACK.value("wrong_diagnosis")
    endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))
    answer = blocks_of(final_answer(fake))
    wrong = element(answer, "wrong_diagnosis")
    assert wrong["text"]["text"] == "Not right?"
    endpoint.interaction(click("wrong_diagnosis", wrong["value"]))
    status, body, _ = endpoint.interaction(note_submission(fake, "it was NCCL"))
    assert status == 200 and body in (b"", b"{}")
    thanks = fake.recorder.wait_for("chat.postEphemeral")[0].args
    assert "recorded" in thanks["text"] and thanks["thread_ts"] == THREAD
    assert metrics.FEEDBACK.value("wrong_diagnosis") == before + 1
    endpoint.event(mention("history 1d", ts="1717172100.000100", event_id="Ev0HIST"))
    shown = all_text(reply_in(fake, "1717172100.000100"))
    assert "1 note: not right" in shown


@pytest.mark.slow
def test_the_same_failure_again_in_its_thread_is_one_line_and_no_new_incident(
        endpoint: Endpoint, fake: FakeSlack, settings: Settings) -> None:
    from bot.flows import HistoryQuery, history

    endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))
    first = final_answer(fake)
    fake.recorder.wait_for("chat.getPermalink")
    fake.recorder.settle()
    for n, ts in ((2, "1717172000.000100"), (3, "1717172100.000100")):
        endpoint.event(mention(f"still down\n```{VLLM_ERROR}```", ts=ts, thread_ts=THREAD,
                               event_id=f"Ev0AGAIN{n}"))
        short = final_answer(fake, n)
        shown = blocks_of(short)
        assert len(shown) == 2 and shown[0]["type"] == "context"  # one line and its buttons
        assert "\n" not in shown[0]["elements"][0]["text"] and len(blocks_of(first)) > 2
        nth = "2nd" if n == 2 else "3rd"
        assert f"Same failure as above, {nth} paste: did fix 1 not work?" in all_text(short)
    failed = element(shown, "fix_failed")
    assert failed["text"]["text"] == "Mark fix 1 failed"
    assert element(shown, "show_answer")["url"].startswith("https://example.slack.com/")
    assert [r.incident_id for r in history(HistoryQuery(), settings)] == [1]  # no new one
    endpoint.interaction(click("fix_failed", failed["value"]))
    assert "did not work" in fake.recorder.wait_for("chat.postEphemeral")[0].args["text"]
    # another failure in the same thread is a new answer
    endpoint.event(mention("```torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                           "2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 "
                           "GiB is free.```", ts="1717172200.000100", thread_ts=THREAD,
                           event_id="Ev0OTHER"))
    assert len(blocks_of(final_answer(fake, 4))) > 2


def test_a_forged_modal_metadata_is_rejected(endpoint: Endpoint, fake: FakeSlack) -> None:
    submission = copy.deepcopy(load("view_submission.json"))
    submission["view"]["callback_id"] = "wrong_diagnosis_note"
    submission["view"]["private_metadata"] = '{"incident_id": "1; drop", "channel": "C"}'
    status, body, _ = endpoint.interaction(submission)
    assert status == 200 and json.loads(body)["response_action"] == "errors"


def test_app_home_lists_incidents_and_kb_version(endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention(f"```{VLLM_ERROR}```"))
    final_answer(fake)
    home = copy.deepcopy(load("app_mention_code_block.json"))
    home["event"] = {"type": "app_home_opened", "user": ALLOWED, "channel": "D0HOME",
                     "tab": "home", "event_ts": "1717172600.000100"}
    home["event_id"] = "Ev0HOME"
    endpoint.event(home)
    published = fake.recorder.wait_for("views.publish")[0].args
    view = published["view"]
    text = view if isinstance(view, str) else json.dumps(view)
    assert published["user_id"] == ALLOWED
    assert "Recent incidents" in text and "Knowledge base" in text
    assert "max-model-len" in text


@pytest.mark.slow
def test_secrets_are_not_posted_and_payloads_not_logged(endpoint: Endpoint, fake: FakeSlack,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    caplog.set_level(logging.DEBUG)
    paste = f"HF_TOKEN={token} vllm serve m\n{VLLM_ERROR}\n{token} rejected: {VLLM_ERROR}"
    endpoint.event(mention(f"```{paste}```"))
    assert CHANGE in all_text(final_answer(fake))
    fake.recorder.settle()
    assert not [c.method for c in fake.recorder.calls if token.encode() in c.raw]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert token not in logged and "max seq len" not in logged


def test_slash_paste_is_posted_to_the_channel_and_check_refused_privately(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    fields = load("slash_command.json")
    fields.update(command="/inferbot", text=f"```{VLLM_ERROR}```",
                  response_url=fake.response_url("paste"))
    status, body, _ = endpoint.command(fields)
    assert status == 200 and b"Looking" in body
    answer = fake.recorder.wait_for("response_url")[0].args
    assert answer["response_type"] == "in_channel" and CHANGE in all_text(answer)
    fields.update(text="check gpu-07", user_id="U0MALLORY1",
                  response_url=fake.response_url("check"))
    endpoint.command(fields)
    refusal = fake.recorder.wait_for("response_url", 2)[1].args
    assert refusal["response_type"] == "ephemeral" and f"<@{ALLOWED}>" in refusal["text"]


def test_a_slash_command_s_answer_is_redrawn_through_its_response_url(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    fields = load("slash_command.json")
    fields.update(command="/inferbot", text=f"```{VLLM_ERROR}```",
                  response_url=fake.response_url("paste"))
    endpoint.command(fields)
    answer = fake.recorder.wait_for("response_url")[0].args
    body = on(click("details", element(answer["blocks"], "details")["value"]),
              "1717171800.000100")
    # a slash command's answer is a top-level message: no thread
    del body["container"]["thread_ts"]
    body["message"].pop("thread_ts", None)
    body["response_url"] = fake.response_url("details")
    endpoint.interaction(body)
    redrawn = fake.recorder.wait_for("response_url", 2)[1]
    assert redrawn.args["replace_original"] is True
    assert len(redrawn.args["blocks"]) > len(answer["blocks"])
    assert "The numbers" in all_text(redrawn.args)
    fake.recorder.settle()
    assert fake.recorder.of("chat.update") == []


def test_resolve_in_the_thread_records_the_fix(endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention(f"```{VLLM_ERROR}```", ts=THREAD))
    final_answer(fake)
    endpoint.event(mention("resolve --max-model-len 32768", ts="1717172000.000100",
                           thread_ts=THREAD, event_id="Ev0RESOLVE"))
    done = all_text(final_answer(fake, 2))
    assert "Marked fixed" in done and "--max-model-len 32768" in done
    endpoint.event(mention("history 1d", ts="1717172100.000100", event_id="Ev0HIST"))
    history = all_text(reply_in(fake, "1717172100.000100"))
    assert f"fixed with --max-model-len 32768 by {ALLOWED}" in history


@pytest.mark.slow
def test_a_direct_message_needs_no_mention_and_bot_messages_are_ignored(
        endpoint: Endpoint, fake: FakeSlack) -> None:
    dm = mention("help", kind="message", event_id="Ev0DM")
    dm["event"].update(text="help", channel="D0DIRECT01", channel_type="im")
    endpoint.event(dm)
    assert fake.recorder.wait_for("chat.postMessage")[0].args["channel"] == "D0DIRECT01"
    own = mention("help", kind="message", event_id="Ev0OWN", ts="1717179999.000100")
    own["event"].update(channel_type="im", bot_id="B0BOT00001", user="U0BOT00001")
    endpoint.event(own)
    time.sleep(0.5)
    assert len(fake.posts()) == 1
