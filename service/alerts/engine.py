"""The alert engine: feed each job's new step times to its detector, open/resolve alerts, queue
notifications. `run_once` is called periodically by service/workers.py.

One transaction per job holds the detector state row (FOR UPDATE SKIP LOCKED: several replicas
share jobs without double alerts), the alert changes and the queued deliveries, so a crash at any
point either keeps all of them or none: an alert transition is notified exactly once. No network
I/O here; delivery is a separate job (delivery.py).

Job step time = max over ranks of the step duration. A step is judged once every known rank has
reported it (rank count from job_ranks, else the most ranks seen) or `alert_step_lag` newer steps
exist. Checkpoint steps (any rank with phases.checkpoint > 0) are a class of their own and are not
fed to the detector. Late rows for steps already judged are ignored.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from fabricscope.service.alerts import store
from fabricscope.service.alerts.detect import Detector, DetectorConfig, Transition
from fabricscope.service.alerts.perjob import claim_state, run_jobs
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts")

MAX_STEPS_PER_RUN = 20_000  # per job; the rest waits for the next run


def detector_config(settings: Settings) -> DetectorConfig:
    return DetectorConfig(min_regression=settings.alert_min_regression, threshold=settings.alert_threshold,
                          min_steps=settings.alert_min_steps, recovery_steps=settings.alert_recovery_steps,
                          window=settings.alert_baseline_window,
                          min_history=min(20, settings.alert_baseline_window))


def run_once(conn: psycopg.Connection, *, settings: Settings) -> dict[str, int]:
    cfg = detector_config(settings)
    return run_jobs(conn, jobs_sql="SELECT name FROM jobs ORDER BY name", what="alerts",
                    run_job=lambda job: _run_job(conn, job, cfg, settings))


_STEPS_SQL = """
SELECT step, max(duration_s), extract(epoch FROM min(start_ts))::float8, count(DISTINCT rank),
       bool_or(jsonb_typeof(phases -> 'checkpoint') = 'number' AND (phases ->> 'checkpoint')::float8 > 0)
FROM steps WHERE job = %s AND step > %s
GROUP BY step ORDER BY step LIMIT %s
"""


def _run_job(conn: psycopg.Connection, job: str, cfg: DetectorConfig, settings: Settings) -> tuple[int, int, int]:
    with conn.transaction():
        claimed = claim_state(conn, table="alert_state", job=job)
        if claimed is None:
            return 0, 0, 0  # another replica is on it
        last, state = claimed
        top_row = conn.execute("SELECT max(step) FROM steps WHERE job = %s", (job,)).fetchone()
        top = None if top_row is None or top_row[0] is None else int(top_row[0])
        if top is None or top <= last:
            return 0, 0, 0
        if last == -2:  # first sight of this job: judge recent history only, not its whole past
            last = max(-1, top - settings.alert_backfill_steps - 1)
        ranks_row = conn.execute("SELECT count(*) FROM job_ranks WHERE job = %s", (job,)).fetchone()
        expected = int(ranks_row[0]) if ranks_row else 0
        rows = conn.execute(_STEPS_SQL, (job, last, MAX_STEPS_PER_RUN)).fetchall()
        expected = max(expected, int(state.get("ranks", 0)) if state else 0, max((int(r[3]) for r in rows), default=0))
        det = Detector.from_state(state.get("detector") if state else None, cfg)
        fired = resolved = n = 0
        for step, dur, start, nranks, ckpt in rows:
            if nranks < expected and step > top - settings.alert_step_lag:
                break  # not all ranks in yet; later steps wait too (the detector is sequential)
            last = int(step)
            n += 1
            if ckpt:
                continue
            tr = det.update(int(step), float(dur), float(start))
            if tr is not None and tr.kind == "fire":
                fired += _fire(conn, job, tr, settings)
            elif tr is not None:
                resolved += _resolve(conn, job, tr, settings)
        if det.firing:
            _refresh(conn, job, det, last)
        conn.execute("UPDATE alert_state SET last_step = %s, state = %s, updated_at = now() WHERE job = %s",
                     (last, Jsonb({"detector": det.to_state(), "ranks": expected}), job))
    return n, fired, resolved


def _alert(conn: psycopg.Connection, alert_id: int) -> dict[str, Any]:
    a = store.get_alert(conn, alert_id)
    assert a is not None
    return a


def _fire(conn: psycopg.Connection, job: str, tr: Transition, settings: Settings) -> int:
    summary = Jsonb(store.attribution_summary(conn, job=job, first=tr.since_step, last=tr.step))
    open_ = conn.execute("SELECT id FROM alerts WHERE job = %s AND kind = 'step_regression' AND state = 'firing'",
                         (job,)).fetchone()
    if open_ is not None:  # detector state was reset (or lost) under an open alert: keep the one alert
        conn.execute("""UPDATE alerts SET baseline_s = %s, current_s = %s, last_step = %s, summary = %s,
                        updated_at = now() WHERE id = %s""", (tr.baseline_s, tr.current_s, tr.step, summary, open_[0]))
        return 0
    # A relapse within the cooldown whose resolve notice is still held (never sent) reopens the old
    # alert silently: for the receivers it never stopped firing. No flapping pages.
    prev = conn.execute(
        """SELECT a.id FROM alerts a WHERE a.job = %s AND a.kind = 'step_regression' AND a.state = 'resolved'
             AND a.resolved_at > now() - make_interval(secs => %s)
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.alert_id = a.id AND d.status = 'resolved'
                             AND (d.attempts > 0 OR d.state <> 'pending'))
           ORDER BY a.id DESC LIMIT 1 FOR UPDATE""", (job, settings.alert_cooldown_s)).fetchone()
    if prev is not None and settings.alert_cooldown_s > 0:
        conn.execute("""UPDATE deliveries SET state = 'cancelled', last_error = 'alert reopened within cooldown'
                        WHERE alert_id = %s AND status = 'resolved' AND state = 'pending'""", (prev[0],))
        conn.execute(
            """UPDATE alerts SET state = 'firing', resolved_at = NULL, resolved_step = NULL, reopened = reopened + 1,
                      prior_lost_s = coalesce(lost_s, 0), prior_steps = steps, baseline_s = %s, current_s = %s,
                      lost_s = coalesce(lost_s, 0) + %s, steps = steps + %s, last_step = %s, summary = %s,
                      updated_at = now() WHERE id = %s""",
            (tr.baseline_s, tr.current_s, tr.lost_s, tr.steps, tr.step, summary, prev[0]))
        log.info("alert %s reopened: job %s regressed again within the cooldown", prev[0], job)
        return 0
    row = conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, since_step, detected_at, detected_step, last_step,
                               baseline_s, current_s, lost_s, steps, summary)
           VALUES (%s, 'step_regression', 'firing', to_timestamp(%s), %s, now(), %s, %s, %s, %s, %s, %s, %s)
           RETURNING id""",
        (job, tr.since_ts, tr.since_step, tr.step, tr.step, tr.baseline_s, tr.current_s, tr.lost_s, tr.steps,
         summary)).fetchone()
    assert row is not None
    alert = _alert(conn, int(row[0]))
    queued = store.enqueue(conn, alert, status="firing")
    log.warning("alert %s firing: job %s step time %.3fs -> %.3fs since step %s (%d notifications queued)",
                alert["id"], job, tr.baseline_s, tr.current_s, tr.since_step, queued)
    return 1


def _resolve(conn: psycopg.Connection, job: str, tr: Transition, settings: Settings) -> int:
    row = conn.execute("SELECT id FROM alerts WHERE job = %s AND kind = 'step_regression' AND state = 'firing'",
                       (job,)).fetchone()
    if row is None:
        return 0
    summary = Jsonb(store.attribution_summary(conn, job=job, first=tr.since_step, last=tr.step))
    conn.execute(
        """UPDATE alerts SET state = 'resolved', resolved_at = now(), resolved_step = %s, last_step = %s,
                  current_s = %s, lost_s = prior_lost_s + %s, steps = prior_steps + %s, summary = %s,
                  updated_at = now() WHERE id = %s""",
        (tr.step, tr.step, tr.current_s, tr.lost_s, tr.steps, summary, row[0]))
    alert = _alert(conn, int(row[0]))
    # held for the cooldown: a relapse before it is sent cancels it and reopens this alert
    queued = store.enqueue(conn, alert, status="resolved", delay_s=settings.alert_cooldown_s)
    log.info("alert %s resolved: job %s back to %.3fs at step %s (%d notifications queued)",
             alert["id"], job, tr.current_s, tr.step, queued)
    return 1


def _refresh(conn: psycopg.Connection, job: str, det: Detector, last: int) -> None:
    """Keep the open alert's running numbers (current level, time lost, attribution) fresh."""
    with conn.cursor(row_factory=dict_row) as cur:
        a = cur.execute("SELECT id, since_step FROM alerts WHERE job = %s AND kind = 'step_regression' "
                        "AND state = 'firing'", (job,)).fetchone()
    if a is None:
        return
    summary = Jsonb(store.attribution_summary(conn, job=job, first=a["since_step"], last=last))
    conn.execute("""UPDATE alerts SET current_s = %s, last_step = %s, lost_s = prior_lost_s + %s,
                    steps = prior_steps + %s, summary = %s, updated_at = now() WHERE id = %s""",
                 (det.current_s(), last, det.lost_s, det.n_regressed, summary, a["id"]))
