"""Migration 0006: a locality an earlier version kept as an extra attribute moves to its column, and back."""

from __future__ import annotations

from pathlib import Path

import psycopg
from alembic import command
from psycopg.types.json import Jsonb

from fabricscope.service.db.database import _alembic_config
from tests.support import TestDatabase

LOC = {"gpu_numa": 0, "nic_numa": 1}


def test_migration_0006_moves_locality_out_of_attrs_and_back(test_database: TestDatabase, tmp_path: Path) -> None:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    try:
        cfg = _alembic_config(db.url)
        command.downgrade(cfg, "0005_collective_rollup")
        with psycopg.connect(db.url) as conn:
            conn.execute("INSERT INTO jobs (name) VALUES ('old')")
            conn.execute("INSERT INTO job_ranks (job, rank, host, attrs) VALUES ('old', 0, 'n1', %s),"
                         " ('old', 1, 'n1', %s)", (Jsonb({"locality": LOC, "rack": "r1"}), Jsonb({"locality": "x"})))
        command.upgrade(cfg, "head")
        with psycopg.connect(db.url) as conn:
            rows = conn.execute("SELECT rank, attrs, locality FROM job_ranks ORDER BY rank").fetchall()
            assert rows == [(0, {"rack": "r1"}, LOC), (1, {"locality": "x"}, None)]  # only an object moves
        command.downgrade(cfg, "0005_collective_rollup")
        with psycopg.connect(db.url) as conn:
            assert conn.execute("SELECT attrs FROM job_ranks WHERE rank = 0").fetchone() == (
                {"rack": "r1", "locality": LOC},)
        command.upgrade(cfg, "head")
    finally:
        db.drop()
