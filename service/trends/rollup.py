"""The hourly rollups behind the trends: collective_rollup and step_rollup (migration 0005).

The ingest writer appends ``(job, hour)`` to ``rollup_pending`` for every batch of steps or
collectives; :func:`refresh` (the ``rollup`` job of ``fabricscope serve``) rolls each such hour again
from the raw rows, the jobs taking turns (a job's oldest mark first, so one request marking 50,000
hours cannot starve a later job: issue #46 item 8) and a job's hours a chunk per statement, and
records the watermark in ``rollup_hours``. The hour still
being written is re-rolled at every run that finds new marks for it; late rows (spool replays,
imports) mark their own, older hour.

Per (job, hour, op, size bucket, group size), from the collectives that started in the hour:
count, seconds, bytes, exact p50/p99/p99.9 duration, and the median and p10 nccl-tests busbw
(:mod:`fabricscope.core.busbw`: size = the hook's input bytes, times n for all-gather;
busbw = size / t / 1e9 * k(n-m)/n; t = the collective's own time, the shortest record of its
(group, seq, op), as in service/acceptance/efficiency.py; n = the group size, else the job's world size) with the number
of records and the sum of sizes behind them: the efficiency query answers closed hours from these,
so a busbw has its domain (bytes > 0 and < 1 TiB, t > 0, 2 <= n <= 4Mi).

Per (job, hour), from the step records that started in it (one per rank and step):

- ``step_s``: the sum of their durations;
- ``comm_s``: the sum of the durations of their collectives (same rank and step; barrier left out:
  it carries no payload and measures skew, which the step time already holds);
- ``exposed_comm_s``: per rank and step, the length of the union of those collectives' intervals
  clipped to the step, summed. Collectives in flight at the same time (DDP buckets, TP next to DP)
  count once. The hook times collectives, not compute, so overlap with compute is seen only where
  a collective is asynchronous and another one covers it; for synchronous collectives (gloo, and
  what the simulator models) this is the time the rank was blocked in communication, exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import psycopg

from fabricscope.core.busbw import FACTOR_FORM, HOOK_OPS, OUTPUT_SIZED, OWN_TIME_SQL

_HOOK = sorted(HOOK_OPS)
FACTORS = {"f_op": _HOOK, "f_canon": [HOOK_OPS[o] for o in _HOOK],
           "f_k": [FACTOR_FORM[HOOK_OPS[o]][0] for o in _HOOK], "f_m": [FACTOR_FORM[HOOK_OPS[o]][1] for o in _HOOK],
           "f_out": [HOOK_OPS[o] in OUTPUT_SIZED for o in _HOOK]}

COLLECTIVES_SELECT = """
WITH f AS (SELECT * FROM unnest(%(f_op)s::text[], %(f_canon)s::text[], %(f_k)s::int[], %(f_m)s::int[],
                                %(f_out)s::bool[]) AS f(op, canon, k, m, outn)),
w AS (SELECT coalesce((SELECT nullif(count(*), 0)::int FROM job_ranks WHERE job = %(job)s),
                      (SELECT CASE WHEN labels ->> 'world_size' ~ '^[0-9]{1,7}$' THEN (labels ->> 'world_size')::int
                              END FROM jobs WHERE name = %(job)s)) AS world),
rec AS (
    SELECT coalesce(f.canon, c.op) AS op, coalesce(c.group_size, w.world, 0) AS n, c.duration_s,
           """ + OWN_TIME_SQL + """ AS own_s,  -- the collective's own time, for its busbw
           greatest(coalesce(c.bytes, 0), 0) AS bytes, f.k, f.m, coalesce(f.outn, false) AS outn
    FROM collectives c LEFT JOIN f ON f.op = c.op CROSS JOIN w
    WHERE c.job = %(job)s AND c.start_ts >= %(h)s AND c.start_ts < %(h)s + INTERVAL '1 hour'
),
sized AS (
    SELECT op, n, duration_s, own_s, bytes, k, m,
           CASE WHEN outn AND n BETWEEN 1 AND 4194304 AND bytes < 1099511627776 THEN bytes * n ELSE bytes END AS size
    FROM rec
),
b AS (
    SELECT op, n, duration_s, bytes,
           CASE WHEN size <= 1 THEN 1 ELSE 1::bigint << (length(ltrim(size::bit(64)::text, '0')) - 1) END AS bucket,
           size,
           -- the same expression as service/acceptance/efficiency.py: the same float8 result
           CASE WHEN k IS NOT NULL AND n BETWEEN 2 AND 4194304 AND bytes > 0 AND bytes < 1099511627776
                     AND own_s > 0
                THEN size / own_s / 1e9 * (k * (n - m))::float8 / n END AS busbw
    FROM sized
)
SELECT %(job)s, %(h)s, op, bucket, n, cnt, sum_s, bytes::bigint, q[1], q[2], q[3], bw[1], bw[2], bw_n, bw_bytes
FROM (SELECT op, bucket, n, count(*) AS cnt, sum(duration_s) AS sum_s, sum(bytes) AS bytes,
             percentile_cont(ARRAY[0.5, 0.99, 0.999]) WITHIN GROUP (ORDER BY duration_s) AS q,
             percentile_cont(ARRAY[0.5, 0.1]) WITHIN GROUP (ORDER BY busbw) AS bw, count(busbw) AS bw_n,
             coalesce(sum(size) FILTER (WHERE busbw IS NOT NULL), 0)::float8 AS bw_bytes
      FROM b GROUP BY op, bucket, n) g
"""

STEPS_SELECT = """
WITH s AS (
    SELECT rank, step, start_ts, end_ts, duration_s FROM steps
    WHERE job = %(job)s AND start_ts >= %(h)s AND start_ts < %(h)s + INTERVAL '1 hour'
),
c AS (
    SELECT c.rank, c.step, c.duration_s, greatest(c.start_ts, s.start_ts) AS a, least(c.end_ts, s.end_ts) AS b
    FROM collectives c JOIN s ON s.rank = c.rank AND s.step = c.step
    WHERE c.job = %(job)s AND c.op <> 'barrier'
      AND c.start_ts >= %(h)s - INTERVAL '1 minute' AND c.start_ts <= (SELECT max(end_ts) FROM s)
),
o AS (
    SELECT rank, step, duration_s, a, b,
           max(b) OVER (PARTITION BY rank, step ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
    FROM c
),
per AS (
    SELECT rank, step, sum(duration_s) AS comm,
           sum(greatest(extract(epoch FROM b - greatest(a, coalesce(prev, a))), 0)) AS exposed
    FROM o GROUP BY rank, step
)
SELECT %(job)s, %(h)s, count(DISTINCT s.step), count(*), sum(s.duration_s), coalesce(sum(per.comm), 0),
       coalesce(sum(per.exposed), 0)
FROM s LEFT JOIN per USING (rank, step)
HAVING count(*) > 0
"""


# INSERT ... WITH ... SELECT: the SELECTs alone are what an answer from the raw rows would cost (bench/trends.py)
COLLECTIVES_SQL = ("INSERT INTO collective_rollup (job, hour, op, bucket, group_size, count, sum_s, sum_bytes, "
                   "p50_s, p99_s, p999_s, busbw_p50_gbps, busbw_p10_gbps, busbw_count, busbw_bytes)\n"
                   + COLLECTIVES_SELECT)
STEPS_SQL = ("INSERT INTO step_rollup (job, hour, steps, rank_steps, step_s, comm_s, exposed_comm_s)\n"
             + STEPS_SELECT)


def _over_hours(select: str) -> str:
    """``select`` (one hour, ``%(h)s``) run for every hour of ``%(hours)s`` in one statement."""
    return ("SELECT x.* FROM unnest(%(hours)s::timestamptz[]) AS hh(h) CROSS JOIN LATERAL (\n"
            + select.replace("%(h)s", "hh.h") + "\n) x")


COLLECTIVES_HOURS_SQL = COLLECTIVES_SQL.split("\n", 1)[0] + "\n" + _over_hours(COLLECTIVES_SELECT)
# STEPS_SELECT for a set of hours in one pass over the job's steps: per hour (the LATERAL form)
# PostgreSQL reads every step of the job through its (job, step) index each time, so 50,000 marked
# hours of one job cost 50,000 full reads. Same rows, same sums, grouped by hour.
STEPS_HOURS_SELECT = """
WITH hs AS (SELECT DISTINCT h FROM unnest(%(hours)s::timestamptz[]) AS u(h)),
s AS (
    SELECT hs.h, st.rank, st.step, st.start_ts, st.end_ts, st.duration_s
    -- the hour a step started in, as an equality (a hash join, whatever the chunk's size); marks
    -- are whole UTC hours (service/db/writer.py mark_rollup), so this is start_ts in [h, h + 1 h)
    FROM steps st JOIN hs ON to_timestamp(floor(extract(epoch FROM st.start_ts) / 3600) * 3600) = hs.h
    WHERE st.job = %(job)s AND st.start_ts >= (SELECT min(h) FROM hs)
      AND st.start_ts < (SELECT max(h) FROM hs) + INTERVAL '1 hour'
),
last AS (SELECT h, max(end_ts) AS end_ts FROM s GROUP BY h),
c AS (
    SELECT s.h, c.rank, c.step, c.duration_s, greatest(c.start_ts, s.start_ts) AS a, least(c.end_ts, s.end_ts) AS b
    FROM collectives c JOIN s ON s.rank = c.rank AND s.step = c.step JOIN last ON last.h = s.h
    WHERE c.job = %(job)s AND c.op <> 'barrier'
      AND c.start_ts >= s.h - INTERVAL '1 minute' AND c.start_ts <= last.end_ts
      AND c.start_ts >= (SELECT min(h) FROM hs) - INTERVAL '1 minute'
      AND c.start_ts <= (SELECT max(end_ts) FROM last)
),
o AS (
    SELECT h, rank, step, duration_s, a, b,
           max(b) OVER (PARTITION BY h, rank, step ORDER BY a, b
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
    FROM c
),
per AS (
    SELECT h, rank, step, sum(duration_s) AS comm,
           sum(greatest(extract(epoch FROM b - greatest(a, coalesce(prev, a))), 0)) AS exposed
    FROM o GROUP BY h, rank, step
)
SELECT %(job)s, s.h, count(DISTINCT s.step), count(*), sum(s.duration_s), coalesce(sum(per.comm), 0),
       coalesce(sum(per.exposed), 0)
FROM s LEFT JOIN per USING (h, rank, step)
GROUP BY s.h
"""
STEPS_HOURS_SQL = STEPS_SQL.split("\n", 1)[0] + "\n" + STEPS_HOURS_SELECT

# Hours rolled per statement: grown while a statement is quick, halved when one is slow, so a run
# covers thousands of small hours or a few heavy ones within the same time (issue #46 item 8).
CHUNK_MAX = 1024
CHUNK_QUICK_S = 0.5


@dataclass
class Refreshed:
    hours: int = 0  # (job, hour) pairs rolled
    left: int = 0  # pairs still marked when the run stopped (batch or time budget)


def roll_hour(conn: psycopg.Connection, *, job: str, hour: datetime) -> tuple[int, int]:
    """Replace the rollup rows of one (job, hour) from the raw rows, in the caller's transaction;
    returns the (collective, step) rollup rows written."""
    return roll_hours(conn, job=job, hours=[hour])


def roll_hours(conn: psycopg.Connection, *, job: str, hours: list[datetime]) -> tuple[int, int]:
    """:func:`roll_hour` for several hours of one job, one statement per table."""
    p = {"job": job, "hours": hours}
    # An hour of a job is thousands of rows on each side of every join: never a nested loop. A plan
    # made before a new chunk's first ANALYZE (TimescaleDB estimates such a chunk at one row) chose
    # one and re-ran the `per` aggregate for each of the hour's steps: 4+ minutes instead of 0.3 s
    # for `make run`'s 64-rank job (#47). SET LOCAL: this transaction's statements only.
    conn.execute("SET LOCAL enable_nestloop = off")
    conn.execute("DELETE FROM collective_rollup WHERE job = %(job)s AND hour = ANY(%(hours)s::timestamptz[])", p)
    conn.execute("DELETE FROM step_rollup WHERE job = %(job)s AND hour = ANY(%(hours)s::timestamptz[])", p)
    nc = conn.execute(COLLECTIVES_HOURS_SQL, {**FACTORS, **p}).rowcount
    ns = conn.execute(STEPS_HOURS_SQL, p).rowcount
    conn.execute("""
        INSERT INTO rollup_hours (job, hour, rolled_at, collectives, steps)
        SELECT %(job)s, hh.h, now(),
               (SELECT coalesce(sum(count), 0) FROM collective_rollup WHERE job = %(job)s AND hour = hh.h),
               (SELECT coalesce(sum(rank_steps), 0) FROM step_rollup WHERE job = %(job)s AND hour = hh.h)
        FROM unnest(%(hours)s::timestamptz[]) AS hh(h)
        ON CONFLICT (job, hour) DO UPDATE SET rolled_at = EXCLUDED.rolled_at, collectives = EXCLUDED.collectives,
                                              steps = EXCLUDED.steps""", p)
    return nc, ns


def _delete_marks(conn: psycopg.Connection, job: str, hours: list[datetime]) -> list[datetime]:
    """Remove the marks of ``hours``; the hours that had one (the others another worker rolled
    since the list was read). Marks committed after this DELETE survive it and bring the hour back
    in a later run; the rows of those committed before are visible to the statements that follow
    (read committed)."""
    if not hours:
        return []
    rows = conn.execute("DELETE FROM rollup_pending WHERE job = %s AND hour = ANY(%s::timestamptz[]) RETURNING hour",
                        (job, hours)).fetchall()
    return sorted({r[0] for r in rows})


def refresh(conn: psycopg.Connection, *, max_hours: int = 48, budget_s: float = 30.0) -> Refreshed:
    """Roll the marked hours, each job in turn (a job's oldest mark first), until none is left,
    ``max_hours`` were rolled or ``budget_s`` has passed. Fair between jobs (issue #46 item 8): one
    job's 50,000 marked hours do not hold back another job's hour; the hours of one job are rolled
    a chunk per statement. Safe with several workers: an hour being rolled elsewhere (advisory
    lock) is left to that worker."""
    out = Refreshed()
    deadline = time.monotonic() + budget_s
    with conn.transaction():
        todo = conn.execute("""
            SELECT job, hour FROM (
                SELECT job, hour, min(marked_at) AS m,
                       row_number() OVER (PARTITION BY job ORDER BY min(marked_at), hour) AS turn
                FROM rollup_pending GROUP BY job, hour) x
            ORDER BY turn, m, job LIMIT %s""", (max_hours,)).fetchall()
    per_job: dict[str, list[datetime]] = {}
    for job, hour in todo:
        per_job.setdefault(job, []).append(hour)
    chunk = 1
    queues = {job: sorted(hours) for job, hours in per_job.items()}
    while queues and time.monotonic() < deadline:
        for job in list(queues):  # each job in turn, a chunk at a time
            hours, queues[job] = queues[job][:chunk], queues[job][chunk:]
            if not queues[job]:
                del queues[job]
            t0 = time.monotonic()
            with conn.transaction():
                mine = _delete_marks(conn, job, _locked(conn, job, hours))
                if mine:
                    roll_hours(conn, job=job, hours=mine)
                    out.hours += len(mine)
            took = time.monotonic() - t0
            chunk = min(CHUNK_MAX, chunk * 2) if took < CHUNK_QUICK_S else max(1, chunk // 2)
            if time.monotonic() >= deadline:
                break
    with conn.transaction():
        left = conn.execute("SELECT count(*) FROM (SELECT DISTINCT job, hour FROM rollup_pending) x").fetchone()
    out.left = int(left[0]) if left else 0
    return out


def _locked(conn: psycopg.Connection, job: str, hours: list[datetime]) -> list[datetime]:
    """The hours of ``hours`` not being rolled by another worker now (advisory lock, held to the
    end of the transaction)."""
    return [r[0] for r in conn.execute(
        """SELECT hh.h FROM unnest(%s::timestamptz[]) AS hh(h)
           WHERE pg_try_advisory_xact_lock(hashtext(%s), ((extract(epoch FROM hh.h)::bigint / 3600)
                                                           %% 2147483648)::int)""", (hours, job)).fetchall()]
