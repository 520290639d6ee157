"""Sample frames in parts (service/db/frames.py): a write's samples of the metrics the engine scores
go in frames apart from the rest, and a partial index covers the scored part (and the frames written
before parts, which hold every metric), so a step's window reads about half of the records it read
at 4,096 ranks (~510,000 of ~950,000).

The new column's default marks the frames already there as holding every metric (PART_ALL): the
engine reads them whole, as before. Adding a column with a constant default rewrites nothing.

Revision ID: 0010_frame_parts
Revises: 0009_sample_frames
Create Date: 2026-12-05
"""

from alembic import op

revision = "0010_frame_parts"
down_revision = "0009_sample_frames"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # 0: every metric (frames.PART_ALL), 1: the scored metrics, 2: the rest
    op.execute("ALTER TABLE sample_frames ADD COLUMN IF NOT EXISTS part smallint NOT NULL DEFAULT 0")
    op.execute("CREATE INDEX IF NOT EXISTS sample_frames_scored ON sample_frames (bucket) WHERE part <> 2")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS sample_frames_scored")
    op.execute("ALTER TABLE sample_frames DROP COLUMN IF EXISTS part")
