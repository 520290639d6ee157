"""The fleet ledger's rollup: GPU-seconds lost per (job, UTC day, layer, component), from the
engine's attributions (table fleet_ledger, migration 0012).

For every slow step the time lost is its excess over the baseline (the engine's ``lost_s``, else
duration minus baseline, never below 0) times the job's ranks: while one component is slow, every
rank waits. A step with several causes splits it by the causes' own ``lost_s`` (their shares); a
step whose causes carry no positive share splits it evenly, and a step with no cause list counts
whole for its top layer and component. Nothing is guessed silently: a job with no placement and no
``world_size`` label counts one rank, and the roll reports how many jobs it counted so
(``Refreshed.ranks_unknown``).

Kept up to date by :func:`refresh` (the ``fleet`` job of ``fabricscope serve``, like the trends
rollup): the (job, day) pairs whose attributions were (re)computed since the watermark, minus an
overlap that covers engine transactions still open when the watermark was taken, are rolled again
from the raw rows. Re-rolling a pair is idempotent, so the overlap costs time, never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

# What a component is, from the layer that blamed it (a mapping table, not an if-chain). A compute
# cause names a GPU (`node07:gpu3`) or, without an interface part, a whole host.
KIND_OF_LAYER = {"fabric": "port", "link": "link", "nic": "nic", "compute": "gpu", "host": "host",
                 "storage": "volume", "unknown": "unknown"}
KINDS = tuple(sorted({*KIND_OF_LAYER.values()}))
KIND_ARGS = {"k_layer": list(KIND_OF_LAYER), "k_kind": list(KIND_OF_LAYER.values())}

ROLL_SQL = """
WITH p AS (SELECT DISTINCT job, day FROM unnest(%(jobs)s::text[], %(days)s::timestamptz[]) AS p(job, day)),
k AS (SELECT * FROM unnest(%(k_layer)s::text[], %(k_kind)s::text[]) AS k(layer, kind)),
r AS (
    SELECT j.job, coalesce((SELECT nullif(count(*), 0)::int FROM job_ranks jr WHERE jr.job = j.job),
                           (SELECT CASE WHEN labels ->> 'world_size' ~ '^[0-9]{1,7}$'
                                        THEN nullif((labels ->> 'world_size')::int, 0) END
                            FROM jobs WHERE name = j.job)) AS ranks
    FROM (SELECT DISTINCT job FROM p) j
),
a AS (
    SELECT a.job, p.day, a.step, coalesce(a.step_start, a.computed_at) AS ts,
           -- NaN sorts above every number in PostgreSQL: only a finite positive excess counts
           CASE WHEN x.v > 0 AND x.v < 'Infinity'::float8 THEN least(x.v, 1e9) ELSE 0 END AS excess, a.evidence,
           CASE WHEN jsonb_typeof(a.causes) = 'array' AND jsonb_array_length(a.causes) > 0 THEN a.causes
                ELSE jsonb_build_array(jsonb_build_object('layer', a.layer, 'component', a.component)) END AS causes
    FROM p JOIN attributions a ON a.job = p.job AND a.slow
    CROSS JOIN LATERAL (SELECT coalesce(a.lost_s, a.duration_s - a.baseline_s) AS v) x
    WHERE coalesce(a.step_start, a.computed_at) >= p.day
     AND coalesce(a.step_start, a.computed_at) < p.day + INTERVAL '1 day'
),
c AS (
    SELECT a.job, a.day, a.step, a.ts, a.excess, a.evidence,
           coalesce(nullif(x ->> 'layer', ''), 'unknown') AS layer, coalesce(x ->> 'component', '') AS component,
           -- a cause's share weight: its own lost_s, clamped so that no sum overflows
           CASE WHEN jsonb_typeof(x -> 'lost_s') = 'number' THEN least(greatest((x ->> 'lost_s')::float8, 0), 1e9)
                ELSE 0 END AS w
    FROM a CROSS JOIN LATERAL jsonb_array_elements(a.causes) AS x
),
s AS (
    SELECT c.*, CASE WHEN sum(w) OVER st > 0 THEN w / sum(w) OVER st ELSE 1.0 / count(*) OVER st END AS share,
           -- the step's evidence for this component: its own source first, then by score
           (SELECT (e ->> 'metric') || ' on ' || (e ->> 'source') FROM jsonb_array_elements(
                    CASE WHEN jsonb_typeof(c.evidence) = 'array' THEN c.evidence ELSE '[]'::jsonb END) AS e
            WHERE jsonb_typeof(e) = 'object' AND e ? 'metric' AND e ? 'source'
            ORDER BY (c.component <> '' AND (e ->> 'source' = c.component
                                             OR e ->> 'source' LIKE c.component || ':%%')) DESC,
                     CASE WHEN jsonb_typeof(e -> 'score') = 'number' THEN (e ->> 'score')::float8 END DESC NULLS LAST
            LIMIT 1) AS ev
    FROM c WINDOW st AS (PARTITION BY job, step)
),
g AS (
    SELECT job, day, layer, component, count(DISTINCT step)::int AS slow_steps, sum(excess * share) AS lost_s,
           min(ts) AS first_seen, max(ts) AS last_seen
    FROM s GROUP BY job, day, layer, component
),
e AS (
    SELECT DISTINCT ON (job, day, layer, component) job, day, layer, component, ev, count(DISTINCT step)::int AS n
    FROM s WHERE ev IS NOT NULL GROUP BY job, day, layer, component, ev
    ORDER BY job, day, layer, component, count(DISTINCT step) DESC, ev
),
-- per layer: distinct steps (two causes of one step in one layer count it once) and its evidence
el AS (
    SELECT DISTINCT ON (job, day, layer) job, day, layer, ev, count(DISTINCT step)::int AS n
    FROM s WHERE ev IS NOT NULL GROUP BY job, day, layer, ev
    ORDER BY job, day, layer, count(DISTINCT step) DESC, ev
),
lay AS (
    INSERT INTO fleet_layer (job, day, layer, slow_steps, gpu_s, first_seen, last_seen, evidence, evidence_n)
    SELECT s.job, s.day, s.layer, count(DISTINCT s.step)::int, sum(s.excess * s.share) * coalesce(max(r.ranks), 1),
           min(s.ts), max(s.ts), max(el.ev), coalesce(max(el.n), 0)
    FROM s JOIN r USING (job)
    LEFT JOIN el ON el.job = s.job AND el.day = s.day AND el.layer = s.layer
    GROUP BY s.job, s.day, s.layer
)
INSERT INTO fleet_ledger (job, day, layer, component, kind, ranks, slow_steps, lost_s, gpu_s, first_seen, last_seen,
                          evidence, evidence_n)
SELECT g.job, g.day, g.layer, g.component,
       CASE WHEN g.layer = 'compute' AND g.component <> '' AND position(':' IN g.component) = 0 THEN 'host'
            ELSE coalesce(k.kind, 'unknown') END,
       coalesce(r.ranks, 1), g.slow_steps, g.lost_s, g.lost_s * coalesce(r.ranks, 1), g.first_seen, g.last_seen,
       e.ev, coalesce(e.n, 0)
FROM g JOIN r USING (job) LEFT JOIN k ON k.layer = g.layer
LEFT JOIN e ON e.job = g.job AND e.day = g.day AND e.layer = g.layer AND e.component = g.component
"""

# A day's component summary over all jobs, rebuilt from its ledger rows.
DAILY_SQL = """
INSERT INTO fleet_daily (day, layer, component, kind, jobs, slow_steps, gpu_s, first_seen, last_seen)
SELECT day, layer, component, min(kind), count(*), sum(slow_steps), sum(gpu_s), min(first_seen), max(last_seen)
FROM fleet_ledger WHERE day = ANY(%(days)s::timestamptz[]) GROUP BY day, layer, component
"""

DAILY_JOBS_SQL = """
WITH ev AS (
    SELECT day, layer, component, jsonb_object_agg(evidence, n) AS evidence
    FROM (SELECT day, layer, component, evidence, sum(evidence_n) AS n FROM fleet_ledger
          WHERE day = ANY(%(days)s::timestamptz[]) AND evidence IS NOT NULL GROUP BY 1, 2, 3, 4) x
    GROUP BY 1, 2, 3
)
INSERT INTO fleet_daily_jobs (component, day, layer, kind, job_names, job_gpu_s, job_steps, evidence)
SELECT l.component, l.day, l.layer, min(l.kind), array_agg(l.job ORDER BY l.job), array_agg(l.gpu_s ORDER BY l.job),
       array_agg(l.slow_steps ORDER BY l.job), coalesce(max(ev.evidence::text), '{}')::jsonb
FROM fleet_ledger l LEFT JOIN ev USING (day, layer, component)
WHERE l.day = ANY(%(days)s::timestamptz[]) GROUP BY l.day, l.layer, l.component
"""

ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)  # date_bin's origin here and in the SQL
SPAN_LEVELS = 5  # fleet_span: spans of 2^0 to 2^5 days

# Level 0 from fleet_daily, level n from level n-1 (its two halves), for the given span starts.
SPAN0_SQL = """
INSERT INTO fleet_span (level, start, layer, component, kind, gpu_s)
SELECT 0, day, layer, component, kind, gpu_s FROM fleet_daily WHERE day = ANY(%(starts)s::timestamptz[])
"""
SPAN_SQL = """
INSERT INTO fleet_span (level, start, layer, component, kind, gpu_s)
SELECT %(level)s, s.start, f.layer, f.component, min(f.kind), sum(f.gpu_s)
FROM unnest(%(starts)s::timestamptz[]) AS s(start)
JOIN fleet_span f ON f.level = %(level)s - 1 AND f.start >= s.start
                 AND f.start < s.start + make_interval(days => 1 << %(level)s)
GROUP BY s.start, f.layer, f.component
"""

# The same spans per job (fleet_span_jobs), rebuilt only for the rolled jobs, in the spans over their
# rolled days (a roll of one job's day never re-reads the other jobs' rows of a 32-day span): level 0
# from their ledger rows, level n from their rows in its two halves at level n-1.
SPAN_JOBS0_SQL = """
INSERT INTO fleet_span_jobs (level, start, layer, component, job, kind, gpu_s, slow_steps)
SELECT 0, f.day, f.layer, f.component, f.job, f.kind, f.gpu_s, f.slow_steps
FROM (SELECT DISTINCT * FROM unnest(%(jobs)s::text[], %(starts)s::timestamptz[]) AS p(job, start)) p
JOIN fleet_ledger f ON f.job = p.job AND f.day = p.start
"""
SPAN_JOBS_SQL = """
INSERT INTO fleet_span_jobs (level, start, layer, component, job, kind, gpu_s, slow_steps)
SELECT %(level)s, p.start, f.layer, f.component, f.job, min(f.kind), sum(f.gpu_s), sum(f.slow_steps)
FROM (SELECT DISTINCT * FROM unnest(%(jobs)s::text[], %(starts)s::timestamptz[]) AS p(job, start)) p
JOIN fleet_span_jobs f ON f.level = %(level)s - 1 AND f.job = p.job
                      AND f.start = ANY(ARRAY[p.start, p.start + make_interval(days => 1 << (%(level)s - 1))])
GROUP BY p.start, f.layer, f.component, f.job
"""
SPAN_JOBS_DELETE_SQL = """
DELETE FROM fleet_span_jobs f USING unnest(%(jobs)s::text[], %(starts)s::timestamptz[]) AS p(job, start)
WHERE f.level = %(level)s AND f.start = p.start AND f.job = p.job
"""

CHANGED_SQL = """
SELECT DISTINCT job, date_bin(INTERVAL '1 day', coalesce(step_start, computed_at), TIMESTAMPTZ '2000-01-01 00:00:00+00')
FROM attributions WHERE %s::timestamptz IS NULL OR computed_at > %s::timestamptz ORDER BY 2, 1
"""


@dataclass
class Refreshed:
    pairs: int = 0  # (job, day) pairs rolled
    rows: int = 0  # ledger rows written
    ranks_unknown: int = 0  # jobs among them counted as one rank (no placement, no world_size label)


def span_start(day: datetime, level: int) -> datetime:
    """The start of the aligned span of 2^level days holding ``day`` (a UTC midnight)."""
    n = (day - ORIGIN).days
    return ORIGIN + timedelta(days=n - n % (1 << level))


def spans(lo: datetime, hi: datetime) -> list[tuple[int, datetime]]:
    """[lo, hi) (UTC midnights) as the fewest aligned spans, largest first where they fit: (level, start)."""
    out = []
    d, end = (lo - ORIGIN).days, (hi - ORIGIN).days
    while d < end:
        level = SPAN_LEVELS
        while level and (d % (1 << level) or d + (1 << level) > end):
            level -= 1
        out.append((level, ORIGIN + timedelta(days=d)))
        d += 1 << level
    return out


def roll(conn: psycopg.Connection, *, pairs: list[tuple[str, datetime]]) -> int:
    """Replace the ledger rows of these (job, day) pairs from the attributions, and the day summaries
    of their days, in the caller's transaction; returns the ledger rows written."""
    if not pairs:
        return 0
    jobs = [j for j, _ in pairs]
    days = [d for _, d in pairs]
    for table in ("fleet_ledger", "fleet_layer"):
        conn.execute(f"DELETE FROM {table} f USING unnest(%s::text[], %s::timestamptz[]) AS p(job, day) "
                     "WHERE f.job = p.job AND f.day = p.day", (jobs, days))
    n = conn.execute(ROLL_SQL, {"jobs": jobs, "days": days, **KIND_ARGS}).rowcount
    touched = sorted(set(days))
    for table, sql in (("fleet_daily", DAILY_SQL), ("fleet_daily_jobs", DAILY_JOBS_SQL)):
        conn.execute(f"DELETE FROM {table} WHERE day = ANY(%s::timestamptz[])", (touched,))
        conn.execute(sql, {"days": touched})
    for level in range(SPAN_LEVELS + 1):
        starts = sorted({span_start(d, level) for d in touched})
        conn.execute("DELETE FROM fleet_span WHERE level = %s AND start = ANY(%s::timestamptz[])", (level, starts))
        conn.execute(SPAN0_SQL if level == 0 else SPAN_SQL, {"level": level, "starts": starts})
        job_spans = sorted({(j, span_start(d, level)) for j, d in pairs})
        args = {"level": level, "jobs": [j for j, _ in job_spans], "starts": [st for _, st in job_spans]}
        conn.execute(SPAN_JOBS_DELETE_SQL, args)
        conn.execute(SPAN_JOBS0_SQL if level == 0 else SPAN_JOBS_SQL, args)
    return n


def refresh(conn: psycopg.Connection, *, overlap_s: float = 600.0, batch: int = 500) -> Refreshed:
    """Roll every (job, day) whose attributions were (re)computed since the watermark minus
    ``overlap_s``, ``batch`` pairs a statement, in one transaction with the new watermark. One worker
    at a time (a transaction advisory lock): another finds it held and returns at once."""
    out = Refreshed()
    with conn.transaction():
        got = conn.execute("SELECT pg_try_advisory_xact_lock(hashtext('fabricscope.fleet'))").fetchone()
        if not (got and got[0]):
            return out
        row = conn.execute("SELECT now(), (SELECT through FROM fleet_watermark)").fetchone()
        assert row is not None
        mark, through = row
        since = None if through is None else through - timedelta(seconds=overlap_s)
        todo = [(str(j), d) for j, d in conn.execute(CHANGED_SQL, (since, since)).fetchall()]
        for i in range(0, len(todo), batch):
            out.rows += roll(conn, pairs=todo[i:i + batch])
        out.pairs = len(todo)
        # `mark` is this transaction's start: an engine transaction that started before it and commits
        # after it wrote computed_at < mark; the overlap re-reads those on the next run
        conn.execute("INSERT INTO fleet_watermark (id, through) VALUES (true, %s) "
                     "ON CONFLICT (id) DO UPDATE SET through = EXCLUDED.through", (mark,))
        if todo:
            unk = conn.execute("SELECT count(DISTINCT job) FROM fleet_ledger f WHERE ranks = 1 AND job = ANY(%s) "
                               "AND NOT EXISTS (SELECT 1 FROM job_ranks jr WHERE jr.job = f.job)",
                               (sorted({j for j, _ in todo}),)).fetchone()
            out.ranks_unknown = int(unk[0]) if unk else 0
    return out
