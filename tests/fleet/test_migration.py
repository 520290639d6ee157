"""Migration 0012 (the fleet ledger) goes down and up again on a database that has attributions,
and the first roll after it counts what was stored before it (the watermark starts empty)."""

from __future__ import annotations

from pathlib import Path

import psycopg
from alembic import command

from fabricscope.service.db.database import _alembic_config
from fabricscope.service.fleet.rollup import refresh
from tests.support import TestDatabase

TABLES = ("fleet_ledger", "fleet_daily", "fleet_span", "fleet_span_jobs", "fleet_daily_jobs", "fleet_layer",
          "fleet_watermark", "fleet_digest_sent")


def _tables(conn: psycopg.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'fleet_%'").fetchall()}


def test_migration_0012_down_and_up_rolls_what_came_before(test_database: TestDatabase, tmp_path: Path) -> None:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    try:
        cfg = _alembic_config(db.url)
        command.downgrade(cfg, "0011_step_phase_columns")
        with psycopg.connect(db.url) as conn:
            assert _tables(conn) == set()
            conn.execute("INSERT INTO jobs (name, labels) VALUES ('before', '{\"world_size\": \"4\"}')")
            conn.execute("""INSERT INTO attributions (job, step, step_start, slow, duration_s, baseline_s, layer,
                                component, lost_s, causes) VALUES ('before', 1, now(), true, 3, 2, 'link', 'c1', 1,
                                '[{"layer": "link", "component": "c1", "lost_s": 1}]')""")
        command.upgrade(cfg, "head")
        with psycopg.connect(db.url, autocommit=True) as conn:
            assert _tables(conn) == set(TABLES)
            assert refresh(conn).pairs == 1
            row = conn.execute("SELECT gpu_s FROM fleet_ledger WHERE job = 'before'").fetchone()
            assert row == (4.0,)
    finally:
        db.drop()
