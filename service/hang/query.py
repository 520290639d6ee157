"""A job's hang answer from the database: its steps, its ranks' last collectives, the hook's
in-flight notices (`collective_entered`, `checkpoint_in_progress` events) and its checkpoints.

Only jobs whose ranks announced the notices (`hang_watch`, collectors/training/lastwords.py) are
judged: for imported or simulated steps, or a framework without the hook, "no step for a while"
cannot tell a hang from a job that ended. A job whose announced ranks all posted `rank_exit` ended."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from fabricscope.service.hang import ras, rule
from fabricscope.service.settings import Settings

RECENT_STEPS = 200  # step rows whose median is the job's own step time


def _last_records(conn: psycopg.Connection, job: str) -> list[rule.Last]:
    finished = conn.execute(
        """SELECT DISTINCT ON (rank, coalesce(group_name, 'world')) rank, coalesce(group_name, 'world'), seq, op
           FROM collectives WHERE job = %s AND seq IS NOT NULL AND op NOT IN ('send', 'recv')
           ORDER BY rank, coalesce(group_name, 'world'), seq DESC""", (job,)).fetchall()
    entered = conn.execute(
        """SELECT DISTINCT ON ((attrs->>'rank')::int, attrs->>'group') (attrs->>'rank')::int, attrs->>'group',
                  (attrs->>'seq')::bigint, attrs->>'op'
           FROM events WHERE job = %s AND kind = 'collective_entered'
             AND jsonb_typeof(attrs->'rank') = 'number' AND jsonb_typeof(attrs->'seq') = 'number'
             AND jsonb_typeof(attrs->'group') = 'string' AND jsonb_typeof(attrs->'op') = 'string'
           ORDER BY (attrs->>'rank')::int, attrs->>'group', (attrs->>'seq')::bigint DESC""", (job,)).fetchall()
    out = [rule.Last(int(r[0]), str(r[1]), int(r[2]), str(r[3]), "finished") for r in finished]
    done = {(x.rank, x.group): x.seq for x in out}
    # an entered notice whose collective has since finished is superseded by the complete record
    out += [rule.Last(int(r[0]), str(r[1]), int(r[2]), str(r[3]), "entered") for r in entered
            if int(r[2]) > done.get((int(r[0]), str(r[1])), -1)]
    return out


def _open_checkpoint(conn: psycopg.Connection, job: str) -> float | None:
    """Start (epoch s) of the newest announced checkpoint with no completed `checkpoint` event after it."""
    row = conn.execute(
        """SELECT extract(epoch FROM p.start_ts) FROM events p
           WHERE p.job = %s AND p.kind = 'checkpoint_in_progress'
             AND NOT EXISTS (SELECT 1 FROM events c WHERE c.job = p.job AND c.kind = 'checkpoint'
                             AND c.end_ts >= p.start_ts)
           ORDER BY p.start_ts DESC LIMIT 1""", (job,)).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _watch(conn: psycopg.Connection, job: str) -> tuple[bool, bool]:
    """(watched: some rank sends in-flight notices, ended: every such rank exited after announcing)."""
    row = conn.execute(
        """WITH w AS (SELECT attrs->>'rank' AS rank, max(start_ts) AS ts FROM events
                      WHERE job = %s AND kind = 'hang_watch' GROUP BY 1)
           SELECT count(*), count(*) FILTER (WHERE EXISTS (
                      SELECT 1 FROM events x WHERE x.job = %s AND x.kind = 'rank_exit'
                        AND x.attrs->>'rank' = w.rank AND x.start_ts >= w.ts))
           FROM w""", (job, job)).fetchone()
    n, exited = (int(row[0]), int(row[1])) if row else (0, 0)
    return n > 0, n > 0 and exited == n


def job_hang(conn: psycopg.Connection, *, job: str, settings: Settings, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    durs = [float(r[0]) for r in conn.execute(
        "SELECT duration_s FROM steps WHERE job = %s ORDER BY end_ts DESC LIMIT %s", (job, RECENT_STEPS)).fetchall()]
    last_row = conn.execute("SELECT extract(epoch FROM max(end_ts)) FROM steps WHERE job = %s", (job,)).fetchone()
    last_end = None if last_row is None or last_row[0] is None else float(last_row[0])
    limit = rule.threshold_s(durs, factor=settings.hang_factor, floor_s=settings.hang_floor_s)
    ckpt = _open_checkpoint(conn, job)
    watched, ended = _watch(conn, job)
    hung = watched and not ended and rule.is_hung(now=now, last_step_end=last_end, threshold=limit,
                                                  checkpoint_since=ckpt, checkpoint_s=settings.hang_checkpoint_s)
    out: dict[str, Any] = {"job": job, "hung": hung, "watched": watched, "ended": ended,
                           "since": last_end if hung else None, "threshold_s": limit,
                           "last_step_end": last_end, "checkpoint_since": ckpt, "suspects": [], "waiting": []}
    if not hung:
        return out
    hosts: dict[int, str] = dict(conn.execute("SELECT rank, host FROM job_ranks WHERE job = %s", (job,)).fetchall())
    found, waiting = rule.suspects(_last_records(conn, job))
    suspects = [{"rank": s.rank, "host": hosts.get(s.rank), "group": s.group, "seq": s.seq, "op": s.op,
                 "state": s.state} for s in found]
    named = ras.facts(ras.recent_reports(conn, job, since=now - settings.hang_ras_recent_s),
                      _world(conn, job)) if settings.hang_ras_recent_s > 0 else {}
    out["suspects"], out["waiting"] = ras.merge(suspects, waiting, named, hosts)
    return out


def _world(conn: psycopg.Connection, job: str) -> int:
    """The job's size: its registered ranks, or the ranks that sent steps where more did."""
    row = conn.execute("SELECT greatest((SELECT count(*) FROM job_ranks WHERE job = %s),"
                       " (SELECT count(DISTINCT rank) FROM steps WHERE job = %s))", (job, job)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
