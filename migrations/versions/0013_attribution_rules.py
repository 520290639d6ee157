"""Which engine rules decided each stored attribution (#44): the verdict's and the cause's ids.

Revision ID: 0013_attribution_rules
Revises: 0012_fleet_ledger
Create Date: 2026-12-07
"""

from alembic import op

revision = "0013_attribution_rules"
down_revision = "0012_fleet_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL for attributions stored before the engine named its rules; they are restated as they are read.
    op.execute("ALTER TABLE attributions ADD COLUMN IF NOT EXISTS rules jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE attributions DROP COLUMN IF EXISTS rules")
