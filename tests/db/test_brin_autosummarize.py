"""Migration 0008: the time-range BRIN indexes summarize their page ranges as they fill (a range no
VACUUM has summarized matches every query: the 4,096-rank bench's slow steps read every page of
samples while none was)."""

from __future__ import annotations

import importlib

import psycopg

mig = importlib.import_module("migrations.versions.0008_brin_autosummarize")


def test_time_range_brin_indexes_autosummarize(db_conn: psycopg.Connection) -> None:
    rows = dict(db_conn.execute(
        "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", (list(mig.INDEXES),)).fetchall())
    assert set(rows) == set(mig.INDEXES)
    for name, opts in rows.items():
        assert "autosummarize=on" in (opts or []), (name, opts)
