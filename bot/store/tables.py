"""The incident store's tables (SQLAlchemy 2 typed ORM).

These classes describe the schema; they never create it. The schema exists only through the
Alembic migrations in `bot/store/migrations/`, and a test checks that the two agree
(autogenerate finds no difference) on SQLite and PostgreSQL.

Some objects live only in the migrations because they are engine-specific and invisible to the
ORM: the FTS5 virtual table and its triggers on SQLite, the `search_tsv` generated column and
its GIN index on PostgreSQL. `include_object` hides them from autogenerate's comparison.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Stable constraint names, so migrations can drop what they created on every engine.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Objects created by the migrations but deliberately absent from the ORM metadata.
FTS_TABLE = "incident_events_fts"
PG_SEARCH_COLUMN = "search_tsv"
PG_SEARCH_INDEX = "ix_incident_events_search_tsv"

EXCERPT_MAX_CHARS = 16_000


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python on every engine.

    PostgreSQL keeps `timestamptz`; SQLite has no time zones, so values are stored as naive UTC
    text (fixed width, so text order is time order) and come back tagged UTC. Without this a
    history filter would compare aware and naive datetimes and fail on one engine only.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class IncidentGroup(Base):
    """One recurring incident: every event with the same fingerprint.

    `problem_id`, `signature`, `host` and `model` are the fingerprint's inputs as hashed (masked
    signature line, case-folded host and model): they are how a group explains its grouping.
    """

    __tablename__ = "incident_groups"
    __table_args__ = (
        CheckConstraint("status IN ('open', 'resolved')", name="status"),
        Index("ix_incident_groups_host_last_seen", "host", "last_seen"),
        Index("ix_incident_groups_problem_last_seen", "problem_id", "last_seen"),
        Index("ix_incident_groups_status_last_seen", "status", "last_seen"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    problem_id: Mapped[str] = mapped_column(String(100), server_default="")
    signature: Mapped[str] = mapped_column(Text, server_default="")
    host: Mapped[str] = mapped_column(String(255), server_default="")
    model: Mapped[str] = mapped_column(String(255), server_default="")
    engine: Mapped[str | None] = mapped_column(String(32))
    engine_version: Mapped[str | None] = mapped_column(String(64))
    kb_version: Mapped[str | None] = mapped_column(String(64))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    count: Mapped[int] = mapped_column(Integer, server_default="0")
    status: Mapped[str] = mapped_column(String(16), server_default="open")
    resolution_fix: Mapped[str | None] = mapped_column(Text)
    resolved_by: Mapped[str | None] = mapped_column(String(255))
    resolved_at: Mapped[datetime | None]
    resolution_note: Mapped[str | None] = mapped_column(Text)
    resolution_link: Mapped[str | None] = mapped_column(Text)  # the answer the fix was set on


class IncidentEvent(Base):
    """One diagnosis as it was given: who asked where, what was found, what was offered.

    `event_uid` is the idempotency key: it is minted when the event is first recorded (or
    spooled), so writing a spooled event twice (a crash between commit and unlinking the spool
    file) is a unique-key conflict, not a duplicate. `created_at` is when the diagnosis was made,
    `recorded_at` when it reached the database (later for spooled events).
    `labels` holds the problem and cause ids and titles, for text search next to the excerpt.
    """

    __tablename__ = "incident_events"
    __table_args__ = (
        Index("ix_incident_events_host_created_at", "host", "created_at"),
        Index("ix_incident_events_problem_created_at", "problem_id", "created_at"),
        Index("ix_incident_events_model_created_at", "model", "created_at"),
        Index("ix_incident_events_group_created_at", "group_id", "created_at"),
        Index("ix_incident_events_created_at", "created_at"),
        Index("ix_incident_events_channel_thread", "channel", "thread"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    event_uid: Mapped[str] = mapped_column(String(36), unique=True)
    group_id: Mapped[int] = mapped_column(ForeignKey("incident_groups.id", ondelete="CASCADE"))
    created_at: Mapped[datetime]
    recorded_at: Mapped[datetime]
    source: Mapped[str] = mapped_column(String(16))
    channel: Mapped[str | None] = mapped_column(String(255))
    thread: Mapped[str | None] = mapped_column(String(255))
    user_name: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255), server_default="")
    model: Mapped[str | None] = mapped_column(String(255))
    engine: Mapped[str | None] = mapped_column(String(32))
    engine_version: Mapped[str | None] = mapped_column(String(64))
    problem_id: Mapped[str] = mapped_column(String(100), server_default="")
    fingerprint: Mapped[str] = mapped_column(String(64))
    kb_version: Mapped[str | None] = mapped_column(String(64))
    problems: Mapped[list[Any]] = mapped_column(JSON)
    causes: Mapped[list[Any]] = mapped_column(JSON)
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)
    fixes: Mapped[list[Any]] = mapped_column(JSON)
    excerpt: Mapped[str] = mapped_column(Text, server_default="")
    labels: Mapped[str] = mapped_column(Text, server_default="")
    diagnosis: Mapped[dict[str, Any]] = mapped_column(JSON)
    permalink: Mapped[str | None] = mapped_column(Text)  # the answer's Slack message


class Feedback(Base):
    """A user's verdict on a diagnosis ("wrong diagnosis" and why), for KB maintainers."""

    __tablename__ = "feedback"
    __table_args__ = (Index("ix_feedback_group_created_at", "group_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime]
    group_id: Mapped[int] = mapped_column(ForeignKey("incident_groups.id", ondelete="CASCADE"))
    event_id: Mapped[int | None] = mapped_column(
        ForeignKey("incident_events.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(32))
    note: Mapped[str] = mapped_column(Text, server_default="")
    who: Mapped[str | None] = mapped_column(String(255))


class CommandAudit(Base):
    """One remote command the collector ran: the audit trail the safety rules promise.

    `audit_uid` makes spooled audit rows idempotent, like `IncidentEvent.event_uid`.
    """

    __tablename__ = "command_audit"
    __table_args__ = (Index("ix_command_audit_host_created_at", "host", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_uid: Mapped[str] = mapped_column(String(36), unique=True)
    created_at: Mapped[datetime]
    host: Mapped[str] = mapped_column(String(255))
    command_id: Mapped[str] = mapped_column(String(100))
    duration_s: Mapped[float] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    bytes_out: Mapped[int] = mapped_column(Integer, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(String(64))
    who: Mapped[str | None] = mapped_column(String(255))


class SlackEventKey(Base):
    """A Slack message already taken by one bot process (bot.slack.dedup): the unique key
    makes exactly one replica answer a retried or doubly delivered message."""

    __tablename__ = "slack_event_keys"
    __table_args__ = (Index("ix_slack_event_keys_created_at", "created_at"),)

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime]


def include_object(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    """Autogenerate filter: skip the engine-specific search objects the ORM cannot describe."""
    if name is None:
        return True
    if type_ == "table" and name.startswith(FTS_TABLE):
        return False
    return not (
        (type_ == "column" and name == PG_SEARCH_COLUMN)
        or (type_ == "index" and name == PG_SEARCH_INDEX)
    )
