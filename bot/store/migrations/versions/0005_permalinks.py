"""where an answer and its fix can be read again: Slack permalinks

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

The history line says "last fixed 2 days ago by @alice with --max-model-len 32768 (thread)"
with a link to the thread where it was fixed, and `inferbot history` links each incident's
answer: `incident_events.permalink` is the answer's message, `incident_groups.resolution_link`
the one the fix was recorded on. Both are null outside Slack.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("incident_events", sa.Column("permalink", sa.Text(), nullable=True))
    op.add_column("incident_groups", sa.Column("resolution_link", sa.Text(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite 3.35+): a batch copy would break the search view on the table
    op.drop_column("incident_groups", "resolution_link")
    op.drop_column("incident_events", "permalink")
