"""The `job_hang` alert: fires once per hang episode with the suspects (rank, host, group, seq, op,
state) and the waiting ranks, resolves when steps arrive again. Called periodically by
service/workers.py next to the other alert engines.

No detector state of its own: the open alert is the episode (the unique index `alerts_one_firing`
allows one firing alert per job and kind), so a restart neither loses nor repeats an episode. An
open alert whose suspects were still unknown at firing (in-flight notices arrive a moment after
the steps stop) gets them filled in; the notification is not sent twice.
"""

from __future__ import annotations

import logging
import time

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.alerts import payloads, store
from fabricscope.service.alerts.perjob import run_jobs
from fabricscope.service.hang.query import job_hang
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts")

KIND = payloads.HANG_KIND


def run_once(conn: psycopg.Connection, *, settings: Settings) -> dict[str, int]:
    # jobs that announced in-flight notices and had a step in the last day (older: long over)
    jobs_sql = """SELECT j.name FROM jobs j
                  WHERE EXISTS (SELECT 1 FROM events e WHERE e.job = j.name AND e.kind = 'hang_watch')
                    AND EXISTS (SELECT 1 FROM steps s WHERE s.job = j.name AND s.start_ts > now() - interval '1 day')
                  ORDER BY j.name"""
    return run_jobs(conn, jobs_sql=jobs_sql, what="hang alerts", run_job=lambda job: _run_job(conn, job, settings))


def _run_job(conn: psycopg.Connection, job: str, settings: Settings) -> tuple[int, int, int]:
    with conn.transaction():
        ans = job_hang(conn, job=job, settings=settings, now=time.time())
        open_ = conn.execute("SELECT id, summary FROM alerts WHERE job = %s AND kind = %s AND state = 'firing' "
                             "FOR UPDATE", (job, KIND)).fetchone()
        if ans["hung"] and open_ is None:
            return 1, _fire(conn, job, ans), 0
        if ans["hung"] and open_ is not None:
            if not (open_[1] or {}).get("suspects") and ans["suspects"]:
                conn.execute("UPDATE alerts SET summary = %s, updated_at = now() WHERE id = %s",
                             (Jsonb(ans), open_[0]))
            return 1, 0, 0
        if not ans["hung"] and open_ is not None:
            return 1, 0, _resolve(conn, int(open_[0]), job)
    return 0, 0, 0


def _fire(conn: psycopg.Connection, job: str, ans: dict[str, object]) -> int:
    row = conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, detected_at, steps, summary)
           VALUES (%s, %s, 'firing', to_timestamp(%s), now(), 0, %s)
           ON CONFLICT (job, kind) WHERE state = 'firing' DO NOTHING RETURNING id""",
        (job, KIND, ans["since"], Jsonb(ans))).fetchone()
    if row is None:
        return 0
    alert = store.get_alert(conn, int(row[0]))
    assert alert is not None
    queued = store.enqueue(conn, alert, status="firing", event=KIND)
    log.warning("alert %s firing: job %s hung; suspects %s (%d notifications queued)", alert["id"], job,
                [(s["rank"], s["group"], s["seq"], s["op"], s["state"]) for s in alert["hang"]["suspects"]], queued)
    return 1


def _resolve(conn: psycopg.Connection, alert_id: int, job: str) -> int:
    conn.execute("UPDATE alerts SET state = 'resolved', resolved_at = now(), updated_at = now() WHERE id = %s",
                 (alert_id,))
    alert = store.get_alert(conn, alert_id)
    assert alert is not None
    queued = store.enqueue(conn, alert, status="resolved", event=KIND)
    log.info("alert %s resolved: job %s steps arriving again (%d notifications queued)", alert_id, job, queued)
    return 1
