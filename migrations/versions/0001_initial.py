"""Initial schema: dictionaries, time series, training timings, events, inventory, answers, alerts.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0001_schema.sql").read_text())


def downgrade() -> None:
    for table in (
        "leases", "deliveries", "webhooks", "alerts", "attributions", "ingest_batches", "events",
        "collectives", "steps", "job_ranks", "jobs", "links", "interfaces", "devices", "samples",
        "series", "metrics", "sources",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
