"""Alembic environment for the incident store.

Two ways in: `bot.store.db.migrate()` hands over an open connection (already holding the
migration lock) in `config.attributes["connection"]`; the `alembic` command line (alembic.ini at
the repository root) gives a URL, or none, in which case the one from `INFERBOT_DATABASE_URL`
(Settings) is used. Either way the engine is built by `bot.store.db.make_engine`, so SQLite gets
the same pragmas and PostgreSQL URLs the same psycopg 3 driver as the running bot.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from bot.store.tables import Base, include_object

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if isinstance(given, Connection):
        _run(given)
        return
    from bot.config import get_settings
    from bot.store.db import make_engine

    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported: the schema is engine-specific")
run_migrations_online()
