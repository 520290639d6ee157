"""Alerts: detector state per job, alert bookkeeping columns, delivery attempts log.

Revision ID: 0002_alerts
Revises: 0001
Create Date: 2026-11-30
"""

from pathlib import Path

from alembic import op

revision = "0002_alerts"
down_revision = "0001"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"


def upgrade() -> None:
    op.execute((_SQL / "0002_alerts.sql").read_text())


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS delivery_attempts")
    op.execute("DROP TABLE IF EXISTS alert_state")
    op.execute("DROP INDEX IF EXISTS deliveries_webhook, deliveries_alert, alerts_one_firing, alerts_started")
    op.execute("ALTER TABLE deliveries DROP COLUMN IF EXISTS status")
    op.execute("DELETE FROM deliveries WHERE state = 'cancelled'")
    op.execute("ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_state_check")
    op.execute("ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check "
               "CHECK (state IN ('pending', 'delivered', 'failed'))")
    op.execute("ALTER TABLE webhooks DROP COLUMN IF EXISTS name, DROP COLUMN IF EXISTS routing_key")
    op.execute("ALTER TABLE alerts DROP COLUMN IF EXISTS detected_at, DROP COLUMN IF EXISTS detected_step, "
               "DROP COLUMN IF EXISTS last_step, DROP COLUMN IF EXISTS resolved_step, "
               "DROP COLUMN IF EXISTS steps, DROP COLUMN IF EXISTS reopened, "
               "DROP COLUMN IF EXISTS prior_lost_s, DROP COLUMN IF EXISTS prior_steps")
