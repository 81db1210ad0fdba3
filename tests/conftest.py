"""Suite-wide rules.

Tests that need a real service (PostgreSQL, sshd, the Slack endpoint) skip with a reason when
the service is missing on a developer machine. Under CI (INFERBOT_REQUIRE_SERVICES=1, set by
.ci/run) such a skip is turned into a failure: a green CI must mean the real parts were tested.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

# The suite leaves no bytecode in the tree: `python -B` covers this process, the variable the
# CLIs and servers the tests start.
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"

SERVICE_MARKERS = ("postgres", "sshd", "slack")
# The real services, as fixtures every test directory may ask for: a fresh PostgreSQL
# database (`pg_url`), the fake Slack Web API (`fake`), sshd on loopback (`sshd`).
pytest_plugins = ("tests.fixtures.postgres", "tests.fixtures.slack", "tests.fixtures.sshd")


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> Generator[None, None, None]:
    """No test reads or writes the developer's real cache, data or config directories, or
    sees the settings an earlier test read."""
    base = tmp_path_factory.getbasetemp() / "xdg"
    for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        path = Path(base / name)
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(path))
    from bot.config import get_settings

    get_settings.cache_clear()  # the settings a test's variables say, not an earlier test's
    yield
    get_settings.cache_clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("INFERBOT_REQUIRE_SERVICES") != "1" or not report.skipped:
        return
    needs = [m for m in SERVICE_MARKERS if item.get_closest_marker(m)]
    if needs:
        report.outcome = "failed"
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = (f"{item.nodeid} needs {', '.join(needs)} but was skipped under CI: "
                           f"{reason}")
