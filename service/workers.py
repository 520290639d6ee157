"""Background work inside `fabricscope serve`: attribution as data arrives, alerting, retention.

APScheduler runs each job on its own interval; a job that overruns is skipped, never stacked.
A stop is bounded (issue #46 item 9): :class:`Background` lets a running job finish within a grace
period, then cancels its database statement (again, until it ends), so a long rollup or a job
waiting on a lock cannot hold the process for minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from apscheduler.schedulers.background import BackgroundScheduler
from psycopg_pool import ConnectionPool

from fabricscope.service.arrival import Arrivals, ArrivalWorker, OwnedJobs
from fabricscope.service.bus.leases import LeaseLost
from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.ingest import detail
from fabricscope.service.observability import metrics as m
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.workers")

# Database unreachable, restarting or out of connections (PoolTimeout is an OperationalError), the
# statement cancelled by a timeout (QueryCanceled is one too), or the job's lease taken over.
EXPECTED: tuple[type[Exception], ...] = (psycopg.OperationalError, LeaseLost)


def retention(conn: psycopg.Connection, *, days: int) -> int:
    """Delete old raw rows: on plain PostgreSQL all of them; with TimescaleDB (whose policy drops old
    chunks of the hypertables) the engine's sample frames and counter increments, plain tables there."""
    tables = [("sample_frames", "bucket"), ("counter_increments", "ts"), ("detail_requests", "requested_at")]
    if not conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone():
        tables += [("samples", "ts"), ("collectives", "start_ts"), ("collective_summaries", "start_ts"),
                   ("ingest_batches", "received_at")]
    total = 0
    for table, col in tables:
        cur = conn.execute(f"DELETE FROM {table} WHERE {col} < now() - make_interval(days => %s)", (days,))
        total += cur.rowcount
    return total


class Running:
    """The connection each running job holds, so that a stop can cancel what it waits on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: dict[str, psycopg.Connection] = {}

    def enter(self, name: str, conn: psycopg.Connection) -> None:
        with self._lock:
            self._conns[name] = conn

    def leave(self, name: str) -> None:
        with self._lock:
            self._conns.pop(name, None)

    def snapshot(self) -> dict[str, psycopg.Connection]:
        with self._lock:
            return dict(self._conns)


class Background:
    """The scheduler and its running jobs; ``shutdown`` is bounded."""

    CANCEL_FOR_S = 5.0  # after the grace: cancel statements this long at most, then leave the rest

    def __init__(self, sched: BackgroundScheduler, running: Running, arrival: ArrivalWorker | None = None) -> None:
        self.scheduler = sched
        self.running = running
        self.arrival = arrival

    def shutdown(self, *, grace_s: float) -> list[str]:
        """Start no new run; wait up to ``grace_s`` for the running ones, then cancel their
        statements until they end. The names of jobs still running at the end (none, normally)."""
        self.scheduler.shutdown(wait=False)
        if self.arrival is not None:
            self.arrival.stop()  # its pass in progress, if any, is in `running` like the others
        deadline = time.monotonic() + grace_s
        while self.running.snapshot() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running.snapshot():
            log.warning("stopping: cancelling background jobs still running after %.0f s: %s", grace_s,
                        ", ".join(sorted(self.running.snapshot())))
        deadline = time.monotonic() + self.CANCEL_FOR_S
        while (left := self.running.snapshot()) and time.monotonic() < deadline:
            for conn in left.values():
                try:
                    conn.cancel()  # the statement running now ends with QueryCanceled; the job with it
                except psycopg.Error as exc:
                    log.debug("cancel failed: %s", exc)
            time.sleep(0.2)
        left = self.running.snapshot()
        if left:
            log.warning("stopping: background jobs %s did not end when cancelled", ", ".join(sorted(left)))
        return sorted(left)


def _guarded(pool: ConnectionPool, name: str, fn: Callable[[psycopg.Connection], Any],
             running: Running | None = None) -> Callable[[], None]:
    reg = running if running is not None else Running()

    def run() -> None:
        try:
            with pool.connection() as conn:
                reg.enter(name, conn)
                try:
                    fn(conn)
                finally:
                    reg.leave(name)
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


def _start_attribution(sched: BackgroundScheduler, pool: ConnectionPool, settings: Settings, *,
                       engine: AttributionEngine, arrivals: Arrivals | None, running: Running) -> ArrivalWorker | None:
    """The attribution jobs: the interval pass, and the arrival worker (returned, started) when steps
    are judged as they arrive; none when correlate_interval_s is 0."""
    if settings.correlate_interval_s <= 0:
        return None
    from fabricscope.service.bus.leases import JobPartitioner

    # Several `serve` processes split the jobs between them with leases (one owner per job).
    owned = OwnedJobs(JobPartitioner("correlate", ttl_s=max(30.0, 3 * settings.correlate_interval_s)))
    # One pass at a time in this process, interval or arrival: both would judge the same steps.
    one_pass = threading.Lock()

    def judge_job(conn: psycopg.Connection, job: str) -> None:
        # then ask a bounded-detail job's ranks for the records of the slow steps they only summarized
        if engine.process_pending(conn, job=job):
            detail.ask_for_slow_steps(conn, job=job)

    def correlate(conn: psycopg.Connection) -> None:
        jobs = [r[0] for r in conn.execute("SELECT name FROM jobs ORDER BY name").fetchall()]
        with one_pass:
            m.ATTRIBUTION_PASSES.labels("interval").inc()
            for job in owned.claim_all(conn, jobs):
                judge_job(conn, job)

    sched.add_job(_guarded(pool, "attribution", correlate, running), "interval",
                  seconds=settings.correlate_interval_s, id="correlate", jitter=1)
    if not (settings.correlate_on_arrival and arrivals is not None):
        return None

    def on_arrival(jobs: set[str]) -> None:
        def judge(conn: psycopg.Connection) -> None:
            with one_pass:
                m.ATTRIBUTION_PASSES.labels("arrival").inc()
                for job in owned.mine(conn, sorted(jobs)):
                    judge_job(conn, job)

        _guarded(pool, "attribution on arrival", judge, running)()

    arrival = ArrivalWorker(arrivals, on_arrival, debounce_s=settings.correlate_debounce_s)
    arrival.start()
    return arrival


def start_background(pool: ConnectionPool, settings: Settings, *, engine: AttributionEngine,
                     arrivals: Arrivals | None = None) -> Background:
    """`engine`: the app's, so attribution in the background and on request share one set of caches.
    `arrivals`: what the app's ingest routes signal; with it (and correlate_on_arrival) steps are
    judged as they arrive (service/arrival.py), the interval job staying as the safety net."""
    logging.getLogger("apscheduler.executors.default").addFilter(_RUNS_AT_DEBUG)
    running = Running()
    sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
    arrival = _start_attribution(sched, pool, settings, engine=engine, arrivals=arrivals, running=running)
    if settings.alert_interval_s > 0:
        from fabricscope.service.alerts.engine import run_once as alerts_once

        sched.add_job(_guarded(pool, "alerts", lambda c: alerts_once(c, settings=settings), running), "interval",
                      seconds=settings.alert_interval_s, id="alerts", jitter=1)
    if settings.alert_interval_s > 0:  # #19: bus bandwidth below the fabric's acceptance baseline
        from fabricscope.service.alerts.busbw import run_once as busbw_once

        sched.add_job(_guarded(pool, "busbw alerts", lambda c: busbw_once(c, settings=settings), running),
                      "interval",
                      seconds=settings.alert_interval_s, id="busbw_alerts", jitter=1)
    if settings.alert_interval_s > 0:  # #45: job_hang
        from fabricscope.service.hang.alert import run_once as hang_once

        sched.add_job(_guarded(pool, "hang alerts", lambda c: hang_once(c, settings=settings)), "interval",
                      seconds=settings.alert_interval_s, id="hang_alerts", jitter=1)
    if settings.delivery_interval_s > 0:
        from fabricscope.service.alerts.delivery import deliver_due

        # its own job: a slow receiver never delays ingest, attribution or alerting
        sched.add_job(_guarded(pool, "deliveries", lambda c: deliver_due(c, settings=settings), running),
                      "interval",
                      seconds=settings.delivery_interval_s, id="deliveries", jitter=1)
    from fabricscope.service.alerts.secretbox import box_for, reencrypt

    # once at start: seal rows from before encryption, move rows to the newest key after a rotation
    sched.add_job(_guarded(pool, "secrets",
                           lambda c: reencrypt(c, box_for(settings.secret_keys, settings.data_dir)), running),
                  id="secrets")
    if settings.rollup_interval_s > 0:
        from fabricscope.service.trends.rollup import refresh as rollup_refresh

        # hourly rollups for the trends; its own job, so a long roll never delays alerting
        sched.add_job(_guarded(pool, "rollup", lambda c: rollup_refresh(
            c, max_hours=settings.rollup_batch_hours, budget_s=settings.rollup_budget_s), running), "interval",
            seconds=settings.rollup_interval_s, id="rollup", jitter=1)
    if settings.fleet_interval_s > 0:  # #48: the fleet ledger, then its component_degraded alerts and digest
        from fabricscope.service.fleet.alerts import run_once as fleet_alerts
        from fabricscope.service.fleet.rollup import refresh as fleet_refresh

        def fleet(conn: psycopg.Connection) -> None:
            fleet_refresh(conn, overlap_s=settings.fleet_overlap_s)
            if settings.fleet_alerts:
                fleet_alerts(conn, settings=settings)

        sched.add_job(_guarded(pool, "fleet", fleet), "interval", seconds=settings.fleet_interval_s, id="fleet",
                      jitter=1)
    if settings.retention_interval_s > 0:
        sched.add_job(_guarded(pool, "retention", lambda c: retention(c, days=settings.retention_days), running),
                      "interval",
                      seconds=settings.retention_interval_s, id="retention")
    sched.start()
    return Background(sched, running, arrival)
