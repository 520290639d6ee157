"""The phases the engine reads of every rank's step (data, forward/backward, optimizer, checkpoint)
as columns beside the `phases` object: at 4,096 ranks a slow step read its ranks' phases as four
JSON lookups a row (~18 ms of the ~28 ms its rank rows took) and the step summaries three.

Columns, not a generated column: adding one rewrites nothing, where a stored generated column would
rewrite the whole table under an exclusive lock. Rows written before hold NULL there, and the
readers fall back to `phases` for them (coalesce), so nothing is backfilled.

Revision ID: 0011_step_phase_columns
Revises: 0010_frame_parts
Create Date: 2026-12-05
"""

from alembic import op

revision = "0011_step_phase_columns"
down_revision = "0010_frame_parts"
branch_labels = None
depends_on = None

COLUMNS = ("data_s", "forward_backward_s", "optimizer_s", "checkpoint_s")


def upgrade() -> None:
    op.execute("ALTER TABLE steps " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c} double precision" for c in COLUMNS))


def downgrade() -> None:
    op.execute("ALTER TABLE steps " + ", ".join(f"DROP COLUMN IF EXISTS {c}" for c in COLUMNS))
