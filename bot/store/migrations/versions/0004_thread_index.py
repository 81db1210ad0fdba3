"""the incident of a Slack thread, found by an index

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

`resolve FIX` typed in an incident's thread looks up the newest incident diagnosed in that
channel and thread (`bot.store.repository.thread_incident`); this index answers it in one
lookup however many incidents the store holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_incident_events_channel_thread", "incident_events",
                    ["channel", "thread"])


def downgrade() -> None:
    op.drop_index("ix_incident_events_channel_thread", table_name="incident_events")
