"""Index of each job's checkpoint events by source, for the engine's loose index scan of where a job
writes its checkpoints (correlate/queries.py CHECKPOINT_SOURCES_CTE, run every topology check).

Revision ID: 0007_checkpoint_events_index
Revises: 0006_placement_locality
Create Date: 2026-12-01
"""

from alembic import op

revision = "0007_checkpoint_events_index"
down_revision = "0006_placement_locality"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Partial: checkpoint events are a small share of all events (XIDs, link flaps, ...), and only
    # they are looked up by (job, source).
    op.execute("CREATE INDEX IF NOT EXISTS events_job_checkpoint ON events (job, source) WHERE kind = 'checkpoint'")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS events_job_checkpoint")
