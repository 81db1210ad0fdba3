"""Engines, connectivity and the schema: everything between a URL and a ready database.

- URLs: `postgresql://` and `postgres://` mean psycopg 3 (`postgresql+psycopg://`), so the URL
  an operator copies from their PostgreSQL docs just works.
- SQLite: WAL (readers never block the writer), a 30 s busy timeout, and `BEGIN IMMEDIATE` for
  write transactions, so concurrent processes queue for the write lock instead of failing with
  "database is locked" when a read transaction tries to upgrade.
- Schema: created on first use (no set-up for `inferbot diagnose`), migrated by `inferbot db
  upgrade` and by `inferbot serve` before it listens, never under the deadline of a call
  someone waits on (`ensure_schema`). The fast path reads alembic_version and compares it with
  HEAD without importing Alembic; only a database behind HEAD pays for the import and the
  migration, under a lock (a file lock beside the SQLite file, a transaction-scoped advisory
  lock on PostgreSQL) so two processes migrating at once take turns and the second finds
  nothing to do.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from bot.errors import one_line

# The newest migration. A test checks it equals Alembic's head, so the start-up check needs no
# Alembic import.
HEAD = "0005"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# pg_advisory_xact_lock key: any constant shared by every inferbot process ("infb").
_PG_MIGRATION_LOCK = 0x696E6662
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 5

T = TypeVar("T")
_engines: dict[str, Engine] = {}
_ready: set[str] = set()


class StoreUnavailable(RuntimeError):
    """The database cannot be reached (down, unreachable, locked past the timeout, no disk).

    Callers that must not lose data spool instead; everything else is a real error.
    """


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer inferbot; this one does not know its schema."""


class SchemaBehind(StoreUnavailable):
    """The database's schema is older than this inferbot's, and this call may not migrate it
    (see `ensure_schema`): an outage to every caller (the incident is spooled) whose line
    says what ends it."""


CONNECTIVITY_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    PoolTimeoutError,
    OSError,
)


@contextlib.contextmanager
def connectivity() -> Iterator[None]:
    """Turn "cannot reach the database" errors into StoreUnavailable (and nothing else)."""
    try:
        yield
    except CONNECTIVITY_ERRORS as exc:
        raise StoreUnavailable(one_line(exc, typed=True)) from exc


# Database calls still running past their deadline, per database URL. While one is, the
# database is taken as hung and further calls fail at once instead of piling up threads.
_stuck: dict[str, int] = {}
_stuck_lock = threading.Lock()


def within(url: str, seconds: float, fn: Callable[[], T]) -> T:
    """`fn()` (a call to the database at `url`), or StoreUnavailable after `seconds`.

    A database that hangs instead of refusing (a paused server, a file another process holds
    locked) does not answer the driver's timeouts: a paused PostgreSQL's kernel still
    acknowledges every packet, and SQLite waits for its busy timeout and retries. So the call
    runs on a daemon thread that is left behind at the deadline; it finishes when the
    database returns (a late write is idempotent: events carry their uid), and until then the
    same database fails fast. Daemon: a CLI that has answered exits without waiting for it.
    """
    with _stuck_lock:
        if _stuck.get(url):
            raise StoreUnavailable(f"the database has not answered for over {seconds:g} s")
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller, or dropped if it left
            outcome.append((False, exc))
        finally:
            done.set()
            with _stuck_lock:
                if late[0]:
                    _stuck[url] -= 1

    late = [False]
    threading.Thread(target=run, name="inferbot-db", daemon=True).start()
    if not done.wait(seconds):
        with _stuck_lock:
            if not done.is_set():
                late[0] = True
                _stuck[url] = _stuck.get(url, 0) + 1
                raise StoreUnavailable(f"the database did not answer within {seconds:g} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)


def database_problem(url: str, deadline_s: float = 5.0) -> str | None:
    """Why the database at `url` cannot be used right now (one line), or None when `SELECT 1`
    works within `deadline_s`. A cheap probe for health checks: no migration, no spool
    drain."""

    def probe() -> None:
        with connectivity(), get_engine(url).connect() as conn:
            conn.execute(text("SELECT 1"))

    try:
        within(url, deadline_s, probe)
    except StoreUnavailable as exc:
        return one_line(exc)
    return None


def normalize_url(url: str) -> str:
    """Map the PostgreSQL URL spellings to psycopg 3; expand `~` in SQLite file paths."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        return parsed.set(database=os.path.expanduser(parsed.database)).render_as_string(
            hide_password=False
        )
    return url


def sqlite_path(url: URL) -> Path | None:
    """The database file of an SQLite URL (None for other engines or in-memory databases)."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def make_engine(url: str) -> Engine:
    """A new engine for `url`, configured for concurrent, outage-tolerant use."""
    normalized = normalize_url(url)
    parsed = make_url(normalized)
    if parsed.get_backend_name() == "sqlite":
        path = sqlite_path(parsed)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    try:  # the driver is imported here; psycopg raises ImportError when libpq will not load
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except ImportError as exc:
        raise StoreUnavailable(
            f"{parsed.get_backend_name()} URLs need psycopg with libpq, which did not load "
            f"({one_line(exc)}): pip install 'psycopg[binary]' (libpq included), or install "
            "libpq itself (Debian and Ubuntu: apt-get install libpq5)") from None


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control away from the sqlite3 module so BEGIN is ours (see _on_begin).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # A bulk write grows the WAL; truncate it back after checkpoints instead of keeping it.
        cursor.execute(f"PRAGMA journal_size_limit={64 * 1024 * 1024}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("sqlite_immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def write_engine(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions take SQLite's write lock up front."""
    return engine.execution_options(sqlite_immediate=True)


def get_engine(url: str) -> Engine:
    """The process-wide engine for `url` (one pool per database, reused across calls)."""
    key = normalize_url(url)
    engine = _engines.get(key)
    if engine is None:
        engine = _engines[key] = make_engine(key)
    return engine


def dispose_engines() -> None:
    """Close every pooled connection (tests, and forked workers that must not share sockets)."""
    for engine in list(_engines.values()):  # a background thread may be opening one
        engine.dispose()
    _engines.clear()
    _ready.clear()


def current_revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def ensure_schema(engine: Engine, *, upgrade: bool = False) -> None:
    """The schema at HEAD, unless this process already knows it is there.

    An empty database gets its schema here: creating tables where nothing is stored yet takes
    a moment. A schema behind HEAD is migrated only with `upgrade` (`inferbot db upgrade`,
    `inferbot serve` before it listens): a migration rewrites what is stored (0003: about a
    minute per million events), so under the deadline of a call someone waits on it would be
    cut off, and the thread left running it killed when the CLI exits. Without `upgrade` it
    is SchemaBehind (SchemaTooNew for a newer schema) and nothing is changed."""
    key = engine.url.render_as_string(hide_password=False)
    if key in _ready:
        return
    with connectivity():
        with engine.connect() as conn:
            rev = current_revision(conn)
        if rev != HEAD:
            if rev is not None and not upgrade:
                # Revisions are zero-padded numbers, so the text order is their order.
                if rev > HEAD:
                    raise _too_new(rev)
                raise SchemaBehind(f"store schema is behind (revision {rev}, this inferbot "
                                   f"needs {HEAD}): run `inferbot db upgrade`")
            migrate(engine, "head")
    _ready.add(key)


def _too_new(rev: str) -> SchemaTooNew:
    return SchemaTooNew(f"the database schema is at revision {rev}, newer than this inferbot "
                        f"knows ({HEAD}); upgrade inferbot")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) for the duration of the block."""
    try:
        import fcntl
    except ImportError:  # not POSIX: SQLite's own locking still keeps the file consistent
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def alembic_config(url: str) -> Any:
    """An Alembic Config for the packaged migrations (no alembic.ini needed when installed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(engine: Engine, revision: str = "head", *, downgrade: bool = False) -> str | None:
    """Upgrade (or downgrade) the schema to `revision`, serialised across processes.

    Returns the revision the database is at afterwards. On PostgreSQL the whole migration runs in
    one transaction holding an advisory lock, so a crash leaves the old schema intact.
    """
    from alembic import command
    from alembic.script import ScriptDirectory

    url = engine.url.render_as_string(hide_password=False)
    cfg = alembic_config(url)
    known = {rev.revision for rev in ScriptDirectory.from_config(cfg).walk_revisions()}
    path = sqlite_path(engine.url)
    lock = _file_lock(path.with_name(path.name + ".migrate-lock")) if path else _nolock()
    run: Callable[[Any, str], None] = command.downgrade if downgrade else command.upgrade
    # SQLite: the write lock taken up front (BEGIN IMMEDIATE), so a migration behind another
    # writer waits for it like any writer; reading the revision first and then writing would
    # be refused at once ("database is locked").
    with lock, write_engine(engine).connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        rev = current_revision(conn)
        if rev is not None and rev not in known:
            raise _too_new(rev)
        cfg.attributes["connection"] = conn
        run(cfg, revision)
        conn.commit()
        return current_revision(conn)


@contextlib.contextmanager
def _nolock() -> Iterator[None]:
    yield
