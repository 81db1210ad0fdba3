"""Who may collect: users and user groups say who, channels say where, nothing set = nobody."""

from __future__ import annotations

from pathlib import Path

from slack_sdk import WebClient

from bot.slack.authz import Authorizer
from tests.fixtures.slack import make_settings
from tests.slack.fakes import BOT_TOKEN, FakeSlack


def authz(fake: FakeSlack, tmp_path: Path, **allowed: list[str]) -> Authorizer:
    return Authorizer(make_settings(fake, tmp_path, **{"allowed_users": [], **allowed}),
                      WebClient(token=BOT_TOKEN, base_url=fake.api_url))


def test_nothing_configured_means_nobody(fake: FakeSlack, tmp_path: Path) -> None:
    a = authz(fake, tmp_path)
    assert not a.may_collect("U0ALICE001", "C0INCIDENT1")
    assert "Nobody is allowed" in a.who_can()


def test_users_and_groups_say_who_channels_say_where(fake: FakeSlack, tmp_path: Path) -> None:
    fake.usergroups["S0ONCALL"] = ["W0ONCALL002"]
    a = authz(fake, tmp_path, allowed_users=["U0ALICE001"], allowed_usergroups=["S0ONCALL"],
              allowed_channels=["C0INCIDENT1"])
    assert a.may_collect("U0ALICE001", "C0INCIDENT1")
    assert a.may_collect("W0ONCALL002", "C0INCIDENT1")
    assert not a.may_collect("U0MALLORY1", "C0INCIDENT1")
    assert not a.may_collect("U0ALICE001", "C0RANDOM01")
    assert a.who_can() == ("Collection is allowed for <@U0ALICE001>, <!subteam^S0ONCALL> "
                           "in <#C0INCIDENT1>.")


def test_group_membership_is_cached_and_a_missing_group_allows_nobody(
        fake: FakeSlack, tmp_path: Path) -> None:
    fake.usergroups["S0ONCALL"] = ["W0ONCALL002"]
    a = authz(fake, tmp_path, allowed_usergroups=["S0ONCALL", "S0GONE"])
    for _ in range(3):
        assert a.may_collect("W0ONCALL002", None)
        assert not a.may_collect("U0MALLORY1", None)
    calls = [c.args["usergroup"] for c in fake.recorder.of("usergroups.users.list")]
    assert calls == ["S0ONCALL", "S0GONE"]


def test_channels_alone_allow_anyone_there(fake: FakeSlack, tmp_path: Path) -> None:
    a = authz(fake, tmp_path, allowed_channels=["C0INCIDENT1"])
    assert a.may_collect("U0ANYONE01", "C0INCIDENT1")
    assert not a.may_collect("U0ANYONE01", "C0ELSE0001")
