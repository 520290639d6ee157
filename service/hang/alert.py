"""The `job_hang` alert: fires once per hang episode with the suspects (rank, host, group, seq, op,
state) and the waiting ranks, resolves when steps arrive again. Called periodically by
service/workers.py next to the other alert engines.

No detector state of its own: the open alert is the episode (the unique index `alerts_one_firing`
allows one firing alert per job and kind), so a restart neither loses nor repeats an episode.

While the episode lasts the open alert follows the hang answer: its summary is rewritten when the
answer changes, and when the suspects change (who, where, why: rank, group, seq, op, state,
ras_state; e.g. in-flight notices arriving a moment after the steps stopped, or NCCL RAS naming a
rank after the collective records did) one `updated` notification goes out. The summary's
`revision` counts those changes and keys their notices (one Idempotency-Key per change, as each
transition has its own), so a poll that finds nothing new, or a second replica, queues nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.alerts import payloads, store
from fabricscope.service.alerts.perjob import run_jobs
from fabricscope.service.hang.query import job_hang
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts")

KIND = payloads.HANG_KIND
UPDATED = "updated"  # the notification status of a changed open alert
_SUSPECT_KEY = ("rank", "group", "seq", "op", "state", "ras_state")


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
            _follow(conn, int(open_[0]), job, open_[1] or {}, ans)
            return 1, 0, 0
        if not ans["hung"] and open_ is not None:
            return 1, 0, _resolve(conn, int(open_[0]), job)
    return 0, 0, 0


def suspect_keys(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a notification must follow: each suspect's who, where and why (not its host or pid)."""
    return sorted((tuple(s.get(k) for k in _SUSPECT_KEY) for s in summary.get("suspects") or []
                   if isinstance(s, dict)), key=repr)


def _follow(conn: psycopg.Connection, alert_id: int, job: str, stored: dict[str, Any], ans: dict[str, Any]) -> int:
    """Rewrite the open alert where the answer changed; one `updated` notice where its suspects did."""
    revision = int(stored.get("revision") or 0)
    if {k: v for k, v in stored.items() if k != "revision"} == ans:
        return 0
    changed = suspect_keys(stored) != suspect_keys(ans)
    revision += changed
    conn.execute("UPDATE alerts SET summary = %s, updated_at = now() WHERE id = %s",
                 (Jsonb({**ans, "revision": revision}), alert_id))
    if not changed:
        return 0  # the waiting ranks or a host name moved: the record follows, nobody is paged
    alert = store.get_alert(conn, alert_id)
    assert alert is not None
    queued = store.enqueue(conn, alert, status=UPDATED, event=KIND, transition=revision)
    log.warning("alert %s updated: job %s still hung; suspects now %s (%d notifications queued)", alert_id, job,
                [s[:1] + s[4:] for s in suspect_keys(ans)], queued)
    return 1


def _fire(conn: psycopg.Connection, job: str, ans: dict[str, object]) -> int:
    row = conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, detected_at, steps, summary)
           VALUES (%s, %s, 'firing', to_timestamp(%s), now(), 0, %s)
           ON CONFLICT (job, kind) WHERE state = 'firing' DO NOTHING RETURNING id""",
        (job, KIND, ans["since"], Jsonb({**ans, "revision": 0}))).fetchone()
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
