"""The fleet ledger (#48): GPU-seconds lost per job, day and component, its watermark, and the
last day the daily digest was queued for.

Revision ID: 0012_fleet_ledger
Revises: 0011_step_phase_columns
Create Date: 2026-12-07
"""

from pathlib import Path

from alembic import op

revision = "0012_fleet_ledger"
down_revision = "0011_step_phase_columns"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0012_fleet_ledger.sql").read_text())


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS attributions_computed")
    for table in ("fleet_digest_sent", "fleet_watermark", "fleet_layer", "fleet_daily_jobs", "fleet_span_jobs",
                  "fleet_span", "fleet_daily", "fleet_ledger"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
