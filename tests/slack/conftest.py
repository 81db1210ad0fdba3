"""The Slack tests' own fixtures: Settings pointing at the fake Web API (`fake`, from
tests/fixtures/slack.py) and the real Bolt HTTP endpoint serving them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Settings
from tests.fixtures.slack import Endpoint, make_settings, serving
from tests.slack.fakes import FakeSlack


@pytest.fixture
def settings(fake: FakeSlack, tmp_path: Path) -> Settings:
    return make_settings(fake, tmp_path)


@pytest.fixture
def endpoint(settings: Settings, fake: FakeSlack) -> Iterator[Endpoint]:
    with serving(settings, fake) as ep:
        yield ep
