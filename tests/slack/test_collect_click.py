"""An authorized "Collect from HOST" click and `check HOST`: the real collector over SSH (the
collector's loopback sshd with stand-in GPU tools), answered in the thread."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from tests.fixtures.slack import ALLOWED, Endpoint
from tests.fixtures.sshd import Sshd
from tests.slack.fakes import FakeSlack, load
from tests.slack.test_first_screen import answer_diagnosis, assert_first_screen, internal_ids
from tests.slack.test_http import all_text, blocks_of, final_answer, mention

pytestmark = [pytest.mark.slack, pytest.mark.sshd]


@pytest.fixture
def inventory(sshd: Sshd, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> None:
    sshd.inventory(tmp_path, {"gpu-07": {"scenario": "kv",
                                         "logs": {"source": "docker", "container": "vllm"}}})
    monkeypatch.setenv("INFERBOT_INVENTORY", str(tmp_path / "hosts.yaml"))


@pytest.mark.slow
def test_authorized_collect_click_diagnoses_the_host_in_the_thread(
        inventory: None, endpoint: Endpoint, fake: FakeSlack, settings: Settings) -> None:
    body: dict[str, Any] = copy.deepcopy(load("block_actions_button.json"))
    body["user"]["id"] = ALLOWED
    body["actions"] = [{**body["actions"][0], "action_id": "collect_host", "value": "gpu-07"}]
    status, _, elapsed = endpoint.interaction(body)
    assert status == 200 and elapsed < 3
    looking = fake.recorder.wait_for("chat.postMessage")[0].args
    assert looking["thread_ts"] == body["container"]["thread_ts"]
    answer = final_answer(fake)
    text = all_text(answer)
    assert "No GPU memory left for any KV cache block" in text and "gpu-07" in text
    # a host check's answer is a first screen like any other (tests/slack/test_first_screen)
    shown = blocks_of(answer)
    assert_first_screen(shown, internal_ids(answer_diagnosis(shown, answer["channel"],
                                                             settings)))
    assert fake.recorder.of("chat.postEphemeral") == []


def test_check_of_a_host_outside_the_inventory_says_so(
        inventory: None, endpoint: Endpoint, fake: FakeSlack) -> None:
    endpoint.event(mention("check gpu-99"))
    assert "not in" in all_text(final_answer(fake))
