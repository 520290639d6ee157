"""Hourly rollups of collectives and steps for trends, and the rollup job's bookkeeping.

Revision ID: 0005_collective_rollup
Revises: 0004_acceptance
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0005_collective_rollup"
down_revision = "0004_acceptance"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0005_collective_rollup.sql").read_text())


def downgrade() -> None:
    for table in ("rollup_hours", "rollup_pending", "step_rollup", "collective_rollup"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
