"""The ops tests reuse the Slack fakes and the per-test PostgreSQL database of the store tests:
the fixtures are imported here, not copied."""

from tests.slack.conftest import fake  # noqa: F401 (fixture)
from tests.store.conftest import pg_available, pg_url  # noqa: F401 (fixtures)
