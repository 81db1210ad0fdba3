"""/metrics: the text exposition format, and the counters fed where the events happen (the
Slack Web API client, the check flow). The diagnosis, latency and dedup counters
are checked end to end in test_replicas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from slack_sdk.errors import SlackApiError

from bot import metrics
from bot.flows import Asker, check_hosts
from bot.kb.loader import load_kb
from bot.slack.app import web_client
from tests.fixtures.slack import make_settings
from tests.slack.fakes import FakeSlack


def test_metrics_exposition_format() -> None:
    counter = metrics.Counter("t_total", "A test counter.", ("problem",))
    hist = metrics.Histogram("t_seconds", "A test histogram.", (0.5, 1.0), ("verb",))
    plain = metrics.Counter("t_plain_total", "An unlabelled test counter.")
    try:
        counter.inc('a"b\nc')
        hist.observe(0.7, "paste")
        hist.observe(3.0, "paste")
        text = metrics.exposition()
    finally:
        metrics.REGISTRY.remove(counter)
        metrics.REGISTRY.remove(hist)
        metrics.REGISTRY.remove(plain)
    assert '# TYPE t_total counter\nt_total{problem="a\\"b\\nc"} 1\n' in text
    assert ('t_seconds_bucket{verb="paste",le="0.5"} 0\n'
            't_seconds_bucket{verb="paste",le="1"} 1\n'
            't_seconds_bucket{verb="paste",le="+Inf"} 2\n'
            't_seconds_sum{verb="paste"} 3.7\nt_seconds_count{verb="paste"} 2\n') in text
    assert "# TYPE t_plain_total counter\nt_plain_total 0\n" in text  # shown before any event


@pytest.mark.slow
def test_slack_api_errors_are_counted_by_method_and_error(fake: FakeSlack,
                                                          tmp_path: Path) -> None:
    client = web_client(make_settings(fake, tmp_path))
    before = metrics.SLACK_API_ERRORS.value("usergroups.users.list", "no_such_subteam")
    with pytest.raises(SlackApiError):
        client.usergroups_users_list(usergroup="S0NOSUCH")
    assert metrics.SLACK_API_ERRORS.value("usergroups.users.list", "no_such_subteam") \
        == before + 1
    down = web_client(make_settings(fake, tmp_path, slack_api_url="http://127.0.0.1:9/api/"))
    with pytest.raises(OSError):
        down.auth_test()
    assert metrics.SLACK_API_ERRORS.value("auth.test", "connection") >= 1


def test_a_host_that_cannot_be_collected_counts_as_an_ssh_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({
        "known_hosts": str(tmp_path / "known_hosts"), "ssh_config": str(tmp_path / "none"),
        "hosts": [{"name": "gpu-gone", "address": "127.0.0.1", "port": 9, "user": "ops"}]}))
    monkeypatch.setenv("INFERBOT_INVENTORY", str(hosts))
    before = metrics.SSH_ERRORS.value()
    asker = Asker(origin="slack", user="U1", channel="C1", thread="1.2")
    [result] = check_hosts(["gpu-gone", "gpu1;id"], asker, load_kb, store=False)[:1]
    assert result.answer is None and result.snapshot.error
    assert metrics.SSH_ERRORS.value() == before + 1  # the refused name is not an SSH error
