"""The loop both alert engines run: each job in its own transaction, one bad job skipped (logged),
a database outage raised to the scheduler (which logs it and tries again next run)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("fabricscope.alerts")

# One job's run: (steps judged, alerts fired, alerts resolved).
JobRun = Callable[[str], tuple[int, int, int]]


def run_jobs(conn: psycopg.Connection, *, jobs_sql: str, run_job: JobRun, what: str) -> dict[str, int]:
    out = {"jobs": 0, "steps": 0, "fired": 0, "resolved": 0}
    with conn.transaction():
        jobs = [r[0] for r in conn.execute(jobs_sql).fetchall()]
    for job in jobs:
        try:
            n, fired, resolved = run_job(job)
        except psycopg.OperationalError:
            raise  # the database is gone: the worker logs it and retries next run
        except psycopg.Error as exc:  # one bad job must not stop alerting for the others
            log.warning("%s: job %s skipped: %s", what, job, type(exc).__name__)
            continue
        out["jobs"] += n > 0
        out["steps"] += n
        out["fired"] += fired
        out["resolved"] += resolved
    return out


def claim_state(conn: psycopg.Connection, *, table: str, job: str) -> tuple[int, Any] | None:
    """Inside the caller's transaction: the job's detector row of `table` (last step judged, state),
    created on first sight with last_step -2; None when another replica holds it (SKIP LOCKED)."""
    name = sql.Identifier(table)
    conn.execute(sql.SQL("INSERT INTO {} (job, last_step) VALUES (%s, -2) ON CONFLICT DO NOTHING").format(name),
                 (job,))
    row = conn.execute(sql.SQL("SELECT last_step, state FROM {} WHERE job = %s FOR UPDATE SKIP LOCKED").format(name),
                       (job,)).fetchone()
    return None if row is None else (int(row[0]), row[1])
