"""Per-step collective summaries and the service's requests for full detail (#45 item 3).

Revision ID: 0014_collective_summaries
Revises: 0013_attribution_rules
Create Date: 2026-12-08
"""

from pathlib import Path

from alembic import op

revision = "0014_collective_summaries"
down_revision = "0013_attribution_rules"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0014_collective_summaries.sql").read_text())


def downgrade() -> None:
    for table in ("detail_requests", "collective_summaries"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
