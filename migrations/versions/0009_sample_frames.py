"""Sample frames and counter increments (service/db/frames.py): the engine reads a slow step's window
as a few thousand frames instead of ~500,000 sample rows at 4,096 ranks, and its link-down look-back
from the few rows where such a counter rose.

A database that already holds samples records when frames began; windows before that are read from
`samples` as before (no backfill: a long history would make the upgrade take hours).

Revision ID: 0009_sample_frames
Revises: 0008_brin_autosummarize
Create Date: 2026-12-03
"""

from alembic import op

revision = "0009_sample_frames"
down_revision = "0008_brin_autosummarize"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS sample_frames (
            bucket   timestamptz NOT NULL,  -- the second its samples fall in
            n        int NOT NULL,          -- records in payload
            payload  bytea NOT NULL         -- frames.RECORD, little-endian
        ) WITH (toast_tuple_target = 8160)""")
    # Read whole and never compressed well (doubles and microsecond times): skip pglz both ways, and
    # keep a frame of up to 400 records (8,000 bytes: frames.FRAME_MAX_RECORDS) in its heap page rather
    # than as four TOAST chunks (the 4,096-rank window's read: 37 -> 26 ms).
    op.execute("ALTER TABLE sample_frames ALTER COLUMN payload SET STORAGE EXTERNAL")
    op.execute("CREATE INDEX IF NOT EXISTS sample_frames_bucket ON sample_frames (bucket)")
    op.execute("""
        CREATE TABLE IF NOT EXISTS counter_increments (
            series_id  int NOT NULL,
            ts         timestamptz NOT NULL,
            rate       double precision NOT NULL
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS counter_increments_ts ON counter_increments (ts)")
    op.execute("CREATE TABLE IF NOT EXISTS sample_frames_since (since timestamptz NOT NULL)")
    op.execute("""INSERT INTO sample_frames_since (since)
        SELECT CASE WHEN EXISTS (SELECT 1 FROM samples) THEN now() ELSE '-infinity'::timestamptz END
        WHERE NOT EXISTS (SELECT 1 FROM sample_frames_since)""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS sample_frames_since")
    op.execute("DROP TABLE IF EXISTS counter_increments")
    op.execute("DROP TABLE IF EXISTS sample_frames")
