"""Per-rank GPU-to-NIC locality (NUMA nodes, PCIe paths, link state, CPU affinity) for the placement audit.

Revision ID: 0006_placement_locality
Revises: 0005_collective_rollup
Create Date: 2026-11-30
"""

from alembic import op

revision = "0006_placement_locality"
down_revision = "0005_collective_rollup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A column of its own (not inside attrs): the audit reads it for every rank of a job, and a
    # locality stored by an earlier version as an extra attribute is moved here.
    op.execute("ALTER TABLE job_ranks ADD COLUMN IF NOT EXISTS locality jsonb")
    op.execute("UPDATE job_ranks SET locality = attrs -> 'locality', attrs = attrs - 'locality'"
               " WHERE attrs ? 'locality' AND jsonb_typeof(attrs -> 'locality') = 'object'")


def downgrade() -> None:
    op.execute("UPDATE job_ranks SET attrs = attrs || jsonb_build_object('locality', locality)"
               " WHERE locality IS NOT NULL")
    op.execute("ALTER TABLE job_ranks DROP COLUMN IF EXISTS locality")
