"""slack event keys: exactly one reply per Slack message, across retries and replicas

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

`bot.slack.dedup` INSERTs `msg:<channel>:<ts>` before answering a message; the primary key makes
the first inserter (on any replica) the only one that answers a Slack retry or a mention that
arrives both as `app_mention` and as `message`. Rows older than a day are pruned by the bot.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "slack_event_keys",
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_slack_event_keys"),
    )
    op.create_index("ix_slack_event_keys_created_at", "slack_event_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_slack_event_keys_created_at", table_name="slack_event_keys")
    op.drop_table("slack_event_keys")
