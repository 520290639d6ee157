"""The time-range BRIN indexes summarize each page range as soon as it fills (autosummarize): a range
no VACUUM has summarized yet matches every query, and a freshly loaded 4,096-rank job's slow step
read the whole samples table (83,000 pages for a window in 6,800; ~1 s of database CPU per step).
With autosummarize, autovacuum's next round summarizes the ranges the writer completed.

Revision ID: 0008_brin_autosummarize
Revises: 0007_checkpoint_events_index
Create Date: 2026-12-02
"""

from alembic import op

revision = "0008_brin_autosummarize"
down_revision = "0007_checkpoint_events_index"
branch_labels = None
depends_on = None

INDEXES = ("samples_ts_brin", "steps_start_brin", "collectives_start_brin")


def _set(value: str) -> None:
    for ix in INDEXES:
        # A storage parameter only: no rewrite, no lock beyond the statement's. On a TimescaleDB
        # hypertable that does not take it the index stays as it was (a notice, not a failed upgrade).
        op.execute(f"""DO $$ BEGIN
            ALTER INDEX IF EXISTS {ix} SET (autosummarize = {value});
        EXCEPTION WHEN feature_not_supported OR wrong_object_type OR invalid_parameter_value THEN
            RAISE NOTICE '{ix}: autosummarize not set';
        END $$""")


def upgrade() -> None:
    _set("on")


def downgrade() -> None:
    _set("off")
