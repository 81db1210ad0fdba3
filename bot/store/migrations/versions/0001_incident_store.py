"""incident store: groups, events, feedback, command audit, text search

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Text search is engine-specific and therefore written out here rather than in the ORM:
SQLite gets an FTS5 external-content table kept in step by triggers (the text is stored once,
in incident_events); PostgreSQL gets a stored generated tsvector column with a GIN index.
Both engines tokenize alike, so a search finds the same events on either: a token is a run of
letters and digits (FTS5's unicode61 rule; on PostgreSQL every other character is replaced by a
space before `to_tsvector`, else its parser would keep `org/Model-7B` or `7.5` as one token).
The 'simple' configuration: log lines are identifiers and numbers, not English prose, so
stemming and stop words would only lose matches.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "incident_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("problem_id", sa.String(100), server_default="", nullable=False),
        sa.Column("signature", sa.Text(), server_default="", nullable=False),
        sa.Column("host", sa.String(255), server_default="", nullable=False),
        sa.Column("model", sa.String(255), server_default="", nullable=False),
        sa.Column("engine", sa.String(32), nullable=True),
        sa.Column("engine_version", sa.String(64), nullable=True),
        sa.Column("kb_version", sa.String(64), nullable=True),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.Column("count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("status", sa.String(16), server_default="open", nullable=False),
        sa.Column("resolution_fix", sa.Text(), nullable=True),
        sa.Column("resolved_by", sa.String(255), nullable=True),
        sa.Column("resolved_at", TS, nullable=True),
        sa.Column("resolution_note", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('open', 'resolved')", name="ck_incident_groups_status"),
        sa.PrimaryKeyConstraint("id", name="pk_incident_groups"),
        sa.UniqueConstraint("fingerprint", name="uq_incident_groups_fingerprint"),
    )
    op.create_index("ix_incident_groups_host_last_seen", "incident_groups", ["host", "last_seen"])
    op.create_index(
        "ix_incident_groups_problem_last_seen", "incident_groups", ["problem_id", "last_seen"]
    )
    op.create_index(
        "ix_incident_groups_status_last_seen", "incident_groups", ["status", "last_seen"]
    )

    op.create_table(
        "incident_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event_uid", sa.String(36), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("channel", sa.String(255), nullable=True),
        sa.Column("thread", sa.String(255), nullable=True),
        sa.Column("user_name", sa.String(255), nullable=True),
        sa.Column("host", sa.String(255), server_default="", nullable=False),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("engine", sa.String(32), nullable=True),
        sa.Column("engine_version", sa.String(64), nullable=True),
        sa.Column("problem_id", sa.String(100), server_default="", nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("kb_version", sa.String(64), nullable=True),
        sa.Column("problems", sa.JSON(), nullable=False),
        sa.Column("causes", sa.JSON(), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("fixes", sa.JSON(), nullable=False),
        sa.Column("excerpt", sa.Text(), server_default="", nullable=False),
        sa.Column("labels", sa.Text(), server_default="", nullable=False),
        sa.Column("diagnosis", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["incident_groups.id"],
            name="fk_incident_events_group_id_incident_groups",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_incident_events"),
        sa.UniqueConstraint("event_uid", name="uq_incident_events_event_uid"),
    )
    op.create_index("ix_incident_events_host_created_at", "incident_events", ["host", "created_at"])
    op.create_index(
        "ix_incident_events_problem_created_at", "incident_events", ["problem_id", "created_at"]
    )
    op.create_index(
        "ix_incident_events_model_created_at", "incident_events", ["model", "created_at"]
    )
    op.create_index(
        "ix_incident_events_group_created_at", "incident_events", ["group_id", "created_at"]
    )
    op.create_index("ix_incident_events_created_at", "incident_events", ["created_at"])

    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("note", sa.Text(), server_default="", nullable=False),
        sa.Column("who", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["incident_events.id"],
            name="fk_feedback_event_id_incident_events",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["incident_groups.id"],
            name="fk_feedback_group_id_incident_groups",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_feedback"),
    )
    op.create_index("ix_feedback_group_created_at", "feedback", ["group_id", "created_at"])

    op.create_table(
        "command_audit",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("audit_uid", sa.String(36), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("command_id", sa.String(100), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("bytes_out", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("who", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_command_audit"),
        sa.UniqueConstraint("audit_uid", name="uq_command_audit_audit_uid"),
    )
    op.create_index("ix_command_audit_host_created_at", "command_audit", ["host", "created_at"])

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE incident_events_fts USING fts5("
            "excerpt, labels, content='incident_events', content_rowid='id')"
        )
        op.execute(
            "CREATE TRIGGER incident_events_fts_ai AFTER INSERT ON incident_events BEGIN "
            "INSERT INTO incident_events_fts(rowid, excerpt, labels) "
            "VALUES (new.id, new.excerpt, new.labels); END"
        )
        op.execute(
            "CREATE TRIGGER incident_events_fts_ad AFTER DELETE ON incident_events BEGIN "
            "INSERT INTO incident_events_fts(incident_events_fts, rowid, excerpt, labels) "
            "VALUES ('delete', old.id, old.excerpt, old.labels); END"
        )
        op.execute(
            "CREATE TRIGGER incident_events_fts_au AFTER UPDATE OF excerpt, labels "
            "ON incident_events BEGIN "
            "INSERT INTO incident_events_fts(incident_events_fts, rowid, excerpt, labels) "
            "VALUES ('delete', old.id, old.excerpt, old.labels); "
            "INSERT INTO incident_events_fts(rowid, excerpt, labels) "
            "VALUES (new.id, new.excerpt, new.labels); END"
        )
    elif dialect == "postgresql":
        op.execute(
            "ALTER TABLE incident_events ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS "
            "(to_tsvector('simple'::regconfig, "
            "regexp_replace(excerpt || ' ' || labels, '[^[:alnum:]]+', ' ', 'g'))) STORED"
        )
        op.execute(
            "CREATE INDEX ix_incident_events_search_tsv ON incident_events USING gin (search_tsv)"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for trigger in (
            "incident_events_fts_au",
            "incident_events_fts_ad",
            "incident_events_fts_ai",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS incident_events_fts")
    op.drop_table("command_audit")
    op.drop_table("feedback")
    op.drop_table("incident_events")
    op.drop_table("incident_groups")
