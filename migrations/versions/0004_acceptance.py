"""Acceptance runs and rows (nccl-tests imports), busbw_below_acceptance detector state.

Revision ID: 0004_acceptance
Revises: 0003_webhook_secrets
Create Date: 2026-12-20
"""

from pathlib import Path

from alembic import op

revision = "0004_acceptance"
down_revision = "0003_webhook_secrets"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0004_acceptance.sql").read_text())


def downgrade() -> None:
    op.execute("DELETE FROM alerts WHERE kind = 'busbw_below_acceptance'")
    for table in ("busbw_alert_state", "acceptance_rows", "acceptance_runs"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
