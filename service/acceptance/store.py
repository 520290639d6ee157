"""Database access for acceptance runs (psycopg 3, plain SQL): insert, list, get, baseline.

A run is *accepted* when nccl-tests found no wrong values: ``wrong_total`` is 0 or absent (``-c 0``
prints no check) and no row has ``#wrong`` > 0. Baselines come from accepted runs only, from their
out-of-place rows (in-place numbers are a second, usually equal, measurement of the same size).
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from fabricscope.core.busbw import size_bucket

Stat = Literal["best", "median"]

_ROW_COLS = ("size_bytes", "bucket", "count", "type", "redop", "root", "placement", "time_us", "algbw_gbps",
             "busbw_gbps", "wrong")
_RUN_COLS = ("id, fabric, labels, op, library, started_at, ranks, nodes, threads, gpus_per_thread, versions, "
             "command, avg_busbw_gbps, wrong_total, source, problems, created_at")

# Per accepted run and size bucket its best out-of-place busbw (a bucket holds sizes [2^k, 2^(k+1))
# and busbw grows with size), then per (fabric, op, bucket, ranks) the best or the median over runs.
# Shared with efficiency.py, which joins it to what jobs achieve.
BASELINE_CTES = """
per_run AS (
    SELECT r.fabric, r.op, r.ranks, r.id AS run_id, w.bucket, max(w.busbw_gbps) AS busbw
    FROM acceptance_runs r JOIN acceptance_rows w ON w.run_id = r.id
    WHERE w.placement = 'out_of_place' AND coalesce(r.wrong_total, 0) = 0
      AND (%(fabric)s::text IS NULL OR r.fabric = %(fabric)s)
      AND (%(op)s::text IS NULL OR r.op = %(op)s)
      AND (%(ranks)s::int IS NULL OR r.ranks = %(ranks)s)
      AND (%(nodes)s::int IS NULL OR r.nodes = %(nodes)s)
      AND NOT EXISTS (SELECT 1 FROM acceptance_rows x WHERE x.run_id = r.id AND x.wrong > 0)
    GROUP BY r.fabric, r.op, r.ranks, r.id, w.bucket
),
baseline AS (
    SELECT fabric, op, bucket, ranks,
           CASE WHEN %(stat)s = 'best' THEN max(busbw)
                ELSE percentile_cont(0.5) WITHIN GROUP (ORDER BY busbw) END AS busbw_gbps,
           count(*) AS runs
    FROM per_run GROUP BY fabric, op, bucket, ranks
)"""


def insert_run(conn: psycopg.Connection, *, run: dict[str, Any]) -> tuple[int, int]:
    """Store one parsed run (the validated POST body) and its rows; returns (id, rows)."""
    with conn.transaction():
        row = conn.execute(
            """INSERT INTO acceptance_runs (fabric, labels, op, library, started_at, ranks, nodes, threads,
                   gpus_per_thread, versions, command, devices, avg_busbw_gbps, wrong_total, source, problems)
               VALUES (%s, %s, %s, %s, to_timestamp(%s), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id""",
            (run["fabric"], Jsonb(run.get("labels") or {}), run["op"], run.get("library"), run.get("started_at"),
             run["ranks"], run.get("nodes"), run.get("threads"), run.get("gpus_per_thread"),
             Jsonb(run.get("versions") or {}), run.get("command"), Jsonb(run.get("devices") or []),
             run.get("avg_busbw_gbps"), run.get("wrong_total"), run.get("source"),
             Jsonb(run.get("problems") or []))).fetchone()
        assert row is not None
        run_id = int(row[0])
        rows = run["rows"]
        with conn.cursor() as cur, cur.copy(
                f"COPY acceptance_rows (run_id, {', '.join(_ROW_COLS)}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row((run_id, r["size_bytes"], size_bucket(r["size_bytes"]), r.get("count"), r.get("type"),
                                r.get("redop"), r.get("root"), r["placement"], r["time_us"], r["algbw_gbps"],
                                r["busbw_gbps"], r.get("wrong")))
    return run_id, len(rows)


def _accepted_sql(alias: str) -> str:
    return (f"(coalesce({alias}.wrong_total, 0) = 0 AND NOT EXISTS "
            f"(SELECT 1 FROM acceptance_rows x WHERE x.run_id = {alias}.id AND x.wrong > 0))")


def list_runs(conn: psycopg.Connection, *, fabric: str | None, op: str | None, limit: int) -> list[dict[str, Any]]:
    """Newest first, without rows and devices (`rows`: how many)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            f"""SELECT {_RUN_COLS},
                       (SELECT count(*) FROM acceptance_rows w WHERE w.run_id = r.id) AS rows,
                       {_accepted_sql('r')} AS accepted
                FROM acceptance_runs r
                WHERE (%(fabric)s::text IS NULL OR r.fabric = %(fabric)s) AND (%(op)s::text IS NULL OR r.op = %(op)s)
                ORDER BY r.id DESC LIMIT %(limit)s""", {"fabric": fabric, "op": op, "limit": limit}).fetchall()


def get_run(conn: psycopg.Connection, *, run_id: int) -> dict[str, Any] | None:
    """One run with its device lines and its rows (out-of-place first, by size)."""
    with conn.cursor(row_factory=dict_row) as cur:
        run = cur.execute(f"SELECT {_RUN_COLS}, devices, {_accepted_sql('acceptance_runs')} AS accepted "
                          "FROM acceptance_runs WHERE id = %s", (run_id,)).fetchone()
        if run is None:
            return None
        run["rows"] = cur.execute(
            f"SELECT {', '.join(_ROW_COLS)} FROM acceptance_rows WHERE run_id = %s "
            "ORDER BY placement DESC, size_bytes", (run_id,)).fetchall()
    return run


def baseline(conn: psycopg.Connection, *, fabric: str | None, op: str | None, ranks: int | None,
             nodes: int | None, stat: Stat) -> list[dict[str, Any]]:
    """Per (fabric, op, size bucket, ranks): the best or median busbw over accepted runs."""
    params = {"fabric": fabric, "op": op, "ranks": ranks, "nodes": nodes, "stat": stat}
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            f"WITH {BASELINE_CTES} SELECT fabric, op, bucket, ranks, busbw_gbps, runs FROM baseline "
            "ORDER BY fabric, op, ranks, bucket", params).fetchall()
