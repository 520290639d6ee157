"""Background work inside `fabricscope serve`: attribution as data arrives, alerting, retention.

APScheduler runs each job on its own interval; a job that overruns is skipped, never stacked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
from apscheduler.schedulers.background import BackgroundScheduler
from psycopg_pool import ConnectionPool

from fabricscope.service.bus.leases import LeaseLost
from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.workers")

# Database unreachable, restarting or out of connections (PoolTimeout is an OperationalError), the
# statement cancelled by a timeout (QueryCanceled is one too), or the job's lease taken over.
EXPECTED: tuple[type[Exception], ...] = (psycopg.OperationalError, LeaseLost)


def retention(conn: psycopg.Connection, *, days: int) -> int:
    """Delete old raw rows: on plain PostgreSQL all of them; with TimescaleDB (whose policy drops old
    chunks of the hypertables) the engine's sample frames and counter increments, plain tables there."""
    tables = [("sample_frames", "bucket"), ("counter_increments", "ts")]
    if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone():
        tables += [("samples", "ts"), ("collectives", "start_ts"), ("ingest_batches", "received_at")]
    total = 0
    for table, col in tables:
        cur = conn.execute(f"DELETE FROM {table} WHERE {col} < now() - make_interval(days => %s)", (days,))
        total += cur.rowcount
    return total


def _guarded(pool: ConnectionPool, name: str, fn: Callable[[psycopg.Connection], Any]) -> Callable[[], None]:
    def run() -> None:
        try:
            with pool.connection() as conn:
                fn(conn)
        except EXPECTED as exc:  # an outage or a lost lease: the next run retries, no traceback needed
            log.warning("%s failed: %s: %s", name, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        except Exception:  # a bug: the job keeps its schedule, but the traceback must be seen
            log.exception("%s crashed", name)

    return run


class _RunsAtDebug(logging.Filter):
    """APScheduler logs each run of a job twice at INFO (every few seconds here): show those at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True  # a missed run or a job's error keeps its level
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_RUNS_AT_DEBUG = _RunsAtDebug()


def start_background(pool: ConnectionPool, settings: Settings, *, engine: AttributionEngine) -> BackgroundScheduler:
    """`engine`: the app's, so attribution in the background and on request share one set of caches."""
    logging.getLogger("apscheduler.executors.default").addFilter(_RUNS_AT_DEBUG)
    sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
    if settings.correlate_interval_s > 0:
        from fabricscope.service.bus.leases import JobPartitioner

        # Several `serve` processes split the jobs between them with leases (one owner per job).
        part = JobPartitioner("correlate", ttl_s=max(30.0, 3 * settings.correlate_interval_s))

        def correlate(conn: psycopg.Connection) -> None:
            jobs = [r[0] for r in conn.execute("SELECT name FROM jobs ORDER BY name").fetchall()]
            for job in part.claim(conn, jobs):
                engine.process_pending(conn, job=job)

        sched.add_job(_guarded(pool, "attribution", correlate), "interval",
                      seconds=settings.correlate_interval_s, id="correlate", jitter=1)
    if settings.alert_interval_s > 0:
        from fabricscope.service.alerts.engine import run_once as alerts_once

        sched.add_job(_guarded(pool, "alerts", lambda c: alerts_once(c, settings=settings)), "interval",
                      seconds=settings.alert_interval_s, id="alerts", jitter=1)
    if settings.alert_interval_s > 0:  # #19: bus bandwidth below the fabric's acceptance baseline
        from fabricscope.service.alerts.busbw import run_once as busbw_once

        sched.add_job(_guarded(pool, "busbw alerts", lambda c: busbw_once(c, settings=settings)), "interval",
                      seconds=settings.alert_interval_s, id="busbw_alerts", jitter=1)
    if settings.alert_interval_s > 0:  # #45: job_hang
        from fabricscope.service.hang.alert import run_once as hang_once

        sched.add_job(_guarded(pool, "hang alerts", lambda c: hang_once(c, settings=settings)), "interval",
                      seconds=settings.alert_interval_s, id="hang_alerts", jitter=1)
    if settings.delivery_interval_s > 0:
        from fabricscope.service.alerts.delivery import deliver_due

        # its own job: a slow receiver never delays ingest, attribution or alerting
        sched.add_job(_guarded(pool, "deliveries", lambda c: deliver_due(c, settings=settings)), "interval",
                      seconds=settings.delivery_interval_s, id="deliveries", jitter=1)
    from fabricscope.service.alerts.secretbox import box_for, reencrypt

    # once at start: seal rows from before encryption, move rows to the newest key after a rotation
    sched.add_job(_guarded(pool, "secrets", lambda c: reencrypt(c, box_for(settings.secret_keys, settings.data_dir))),
                  id="secrets")
    if settings.rollup_interval_s > 0:
        from fabricscope.service.trends.rollup import refresh as rollup_refresh

        # hourly rollups for the trends; its own job, so a long roll never delays alerting
        sched.add_job(_guarded(pool, "rollup", lambda c: rollup_refresh(
            c, max_hours=settings.rollup_batch_hours, budget_s=settings.rollup_budget_s)), "interval",
            seconds=settings.rollup_interval_s, id="rollup", jitter=1)
    if settings.retention_interval_s > 0:
        sched.add_job(_guarded(pool, "retention", lambda c: retention(c, days=settings.retention_days)), "interval",
                      seconds=settings.retention_interval_s, id="retention")
    sched.start()
    return sched
