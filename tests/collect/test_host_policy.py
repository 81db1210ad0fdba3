"""Which hosts may be collected from is one rule for the terminal and for Slack
(`bot.flows.host_refusal`): inventory hosts only, an entry's channels from chat, and this
machine only from the terminal where the operator allowed it. The Slack side of each rule is
checked end to end in tests/slack/test_http.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bot.cli import main
from bot.collect.inventory import Inventory, load_inventory
from bot.config import get_settings
from bot.flows import Asker, host_refusal

TERMINAL = Asker(origin="cli", user="alice")
CHAT = Asker(origin="slack", user="U0ALICE001", channel="C0GPU", thread="1.2")
ELSEWHERE = Asker(origin="slack", user="U0ALICE001", channel="C0OTHER", thread="1.2")


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump({
        "known_hosts": str(tmp_path / "known_hosts"), "ssh_config": str(tmp_path / "none"),
        "hosts": [{"name": "gpu-01", "address": "127.0.0.1", "user": "ops"},
                  {"name": "gpu-02", "address": "127.0.0.1", "user": "ops",
                   "channels": ["C0GPU"]}]}))
    return load_inventory(path)


@pytest.mark.parametrize("asker", [TERMINAL, CHAT], ids=["terminal", "chat"])
def test_both_paths_refuse_bad_and_unknown_names(inventory: Inventory, asker: Asker) -> None:
    assert host_refusal("gpu-01", asker, inventory, allow_localhost=True) is None
    bad = host_refusal("gpu1;id", asker, inventory, allow_localhost=True)
    assert bad == "refused 'gpu1;id': not a valid host name (letters, digits, . _ -)"
    unknown = host_refusal("gpu-99", asker, inventory, allow_localhost=True)
    assert unknown is not None and unknown.startswith("refused 'gpu-99': not in ")
    assert host_refusal("gpu-01", asker, None, allow_localhost=True) == (
        "refused 'gpu-01': no inventory")


def test_an_entry_s_channels_limit_chat_and_not_the_terminal(inventory: Inventory) -> None:
    assert host_refusal("gpu-02", CHAT, inventory, allow_localhost=False) is None
    assert host_refusal("gpu-02", ELSEWHERE, inventory, allow_localhost=False) == (
        "refused 'gpu-02': not allowed from this channel (see the inventory's `channels`)")
    assert host_refusal("gpu-02", TERMINAL, inventory, allow_localhost=False) is None


def test_this_machine_never_from_chat_and_from_the_terminal_only_when_allowed() -> None:
    for allowed in (False, True):
        refusal = host_refusal("localhost", CHAT, None, allow_localhost=allowed)
        assert refusal is not None and "not from chat" in refusal
    assert host_refusal("localhost", TERMINAL, None, allow_localhost=True) is None
    refusal = host_refusal("localhost", TERMINAL, None, allow_localhost=False)
    assert refusal is not None and "INFERBOT_ALLOW_LOCALHOST=true" in refusal


def test_cli_check_local_is_refused_unless_the_operator_allows_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERBOT_ALLOW_LOCALHOST", raising=False)
    assert main(["check", "--local", "--no-store"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("inferbot: refused 'localhost': this machine is read only where "
                            "the operator allows it: set INFERBOT_ALLOW_LOCALHOST=true\n")
    assert "could not read" not in captured.out  # nothing was run

    monkeypatch.setenv("INFERBOT_ALLOW_LOCALHOST", "true")
    get_settings.cache_clear()  # a new process would read the variable afresh
    # allowed, it is read: this machine has no GPU driver, which is said in one line
    assert main(["check", "--local", "--no-store"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("== localhost (local, ")
    assert captured.err.startswith("inferbot: localhost: no NVIDIA driver on this machine")
