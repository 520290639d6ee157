"""Cost of the fleet ledger (#48): the ranking over 30 days of 1,000 jobs.

    python bench/fleet.py [--jobs 1000] [--days 30] [--steps 200] [--repeat 40] [--database-url URL]

Attributions are generated inside PostgreSQL (INSERT ... SELECT generate_series), as the engine
stores them: per job (64 to 4,096 ranks by its world_size label, 1 to 3 days long, inside the 30
days) `--steps` slow steps, each with one or two causes drawn from 3,000 components of every kind
(skewed: a few components cost most), an evidence row per cause. Placement: the fleet is `--pods`
pods of 3000/pods components and a job runs in one, so its causes are its pod's components (the
worst component of a pod slows ~1/pods of the jobs); `--pods 1` is the extreme where every job can
blame every component and the worst ones slow every job of the month. The ledger is then rolled by the
background job's own code (service/fleet/rollup.refresh, timed: what a full re-roll costs).

Timed, each --repeat times, p50 and p95 wall: the ranking of GET /v1/fleet/components (the route's
own function, one connection, no HTTP) over the 30 days, the same with a layer filter, the layers
ranking, and one component's incidents. As the baseline measured in the same run: the same top-20
ranking answered from the raw attributions (their cause lists expanded per step, what a query
without the ledger must do); the ratio baseline / ledger is printed.
Where the server runs on this machine, each figure also gives the backend's server CPU per query
(from /proc: what the machine's load does not inflate), and the per-job part of the top 20 is timed
both ways (the previous day arrays and fleet_span_jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.fleet.queries import Window, _ceil_day, incidents, ranking  # noqa: E402
from fabricscope.service.fleet.rollup import refresh, spans  # noqa: E402
from tests.support import TestDatabase  # noqa: E402

LAYERS = ["fabric", "link", "nic", "compute", "host", "storage"]

FILL_SQL = """
WITH jobs AS (
    SELECT j, %(t0)s::timestamptz + (random() * (%(days)s - 3)) * INTERVAL '1 day' AS t,
           (ARRAY[64, 128, 256, 512, 1024, 4096])[1 + floor(random() * 6)::int] AS ranks,
           1 + floor(random() * 3)::int AS len_days
    FROM generate_series(1, %(jobs)s) j
), ins AS (
    INSERT INTO jobs (name, labels) SELECT 'bench-' || j, jsonb_build_object('world_size', ranks::text) FROM jobs
)
INSERT INTO attributions (job, step, step_start, slow, duration_s, baseline_s, layer, component, confidence, lost_s,
                          evidence, causes)
SELECT 'bench-' || j, s, t + (s::float8 / %(steps)s) * len_days * INTERVAL '1 day', true, 2.0 + x, 2.0,
       LAYERS[1 + c1 %% 6], comp1, 0.8, x,
       jsonb_build_array(jsonb_build_object('source', comp1, 'metric', 'rx_fcs_errors_total', 'value', 12,
                                            'baseline', 0, 'score', 5)),
       CASE WHEN two THEN jsonb_build_array(
                jsonb_build_object('layer', LAYERS[1 + c1 %% 6], 'component', comp1, 'lost_s', x * 0.7),
                jsonb_build_object('layer', LAYERS[1 + c2 %% 6], 'component', comp2, 'lost_s', x * 0.3))
            ELSE jsonb_build_array(jsonb_build_object('layer', LAYERS[1 + c1 %% 6], 'component', comp1,
                                                      'lost_s', x)) END
FROM jobs CROSS JOIN generate_series(1, %(steps)s) s
-- z (0, from both loop variables): the draws are made per row; referring to s alone, the lateral was
-- memoized per step number and every job drew the same 200 components
CROSS JOIN LATERAL (SELECT 0 * s + 0 * j AS z) zz
-- placement: job j runs in pod j %% pods, on that pod's 3000 / pods components only
CROSS JOIN LATERAL (SELECT (j %% %(pods)s) * (3000 / %(pods)s) + floor(power(random(), 3) * (3000 / %(pods)s) + z)::int
                               AS c1,
                           (j %% %(pods)s) * (3000 / %(pods)s) + floor(random() * (3000 / %(pods)s) + z)::int AS c2,
                           random() + z < 0.3 AS two, 0.05 + random() * 0.5 + z AS x, %(layers)s::text[] AS LAYERS) r
CROSS JOIN LATERAL (SELECT 'comp' || c1 || CASE WHEN c1 %% 6 = 4 THEN '' ELSE ':p' || (c1 %% 48) END AS comp1,
                           'comp' || c2 || CASE WHEN c2 %% 6 = 4 THEN '' ELSE ':p' || (c2 %% 48) END AS comp2) n
"""

RAW_RANK_SQL = """
SELECT x ->> 'component' AS component,
       sum(greatest(a.lost_s, 0) * (x ->> 'lost_s')::float8 / nullif(t.w, 0)
           * coalesce((j.labels ->> 'world_size')::int, 1)) AS gpu_s, count(DISTINCT a.job) AS jobs
FROM attributions a JOIN jobs j ON j.name = a.job
CROSS JOIN LATERAL (SELECT sum((y ->> 'lost_s')::float8) AS w FROM jsonb_array_elements(a.causes) y) t
CROSS JOIN LATERAL jsonb_array_elements(a.causes) x
WHERE a.slow AND a.step_start >= %(lo)s AND a.step_start < %(hi)s
GROUP BY 1 ORDER BY 2 DESC LIMIT 20
"""


# The previous answer to the top N's jobs and worst jobs (#48 before fleet_span_jobs): one element per
# job and day unpacked from fleet_daily_jobs' arrays (still rolled), grouped and ranked by a window
# function. Timed in the same run as the ranking's own statement: the before/after of this change.
PREVIOUS_JOBS_SQL = """
WITH pj AS (
    SELECT f.component, u.job, sum(u.gs) AS gs, sum(u.n) AS n
    FROM unnest(%(top)s::text[]) AS g(component)
    JOIN fleet_daily_jobs f ON f.component = g.component AND f.day >= %(lo)s AND f.day < %(hi)s
    CROSS JOIN LATERAL unnest(f.job_names, f.job_gpu_s, f.job_steps) AS u(job, gs, n)
    GROUP BY f.component, u.job
)
SELECT component, count(*) AS jobs,
       jsonb_agg(jsonb_build_object('job', job, 'gpu_hours', gs / 3600.0, 'slow_steps', n) ORDER BY rn)
           FILTER (WHERE rn <= 3) AS worst
FROM (SELECT *, row_number() OVER (PARTITION BY component ORDER BY gs DESC, job COLLATE "C") AS rn FROM pj) x
GROUP BY component
"""
NEW_JOBS_SQL = """
WITH pj AS (
    SELECT g.rn, s.job, sum(s.gpu_s) AS gs, sum(s.slow_steps) AS n
    FROM unnest(%(top)s::text[]) WITH ORDINALITY AS g(component, rn)
    CROSS JOIN unnest(%(levels)s::smallint[], %(starts)s::timestamptz[]) AS b(level, start)
    JOIN fleet_span_jobs s ON s.component = g.component AND s.level = b.level AND s.start = b.start
    GROUP BY g.rn, s.job
)
SELECT rn, count(*) AS jobs, (array_agg(job ORDER BY gs DESC, job COLLATE "C"))[1:3],
       (array_agg(gs ORDER BY gs DESC, job COLLATE "C"))[1:3], (array_agg(n ORDER BY gs DESC, job COLLATE "C"))[1:3]
FROM pj GROUP BY rn
"""


def _backend_cpu_ms(pid: int) -> float | None:
    """The server backend's CPU time (utime + stime), where the server runs on this machine: what a
    query costs the database whatever the machine's load does to its wall time."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def _time(fn: Callable[[], Any], repeat: int, pid: int | None = None) -> dict[str, float]:
    fn()  # warm the cache: the service's reads run warm too
    wall, cpu, srv = [], [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        s0 = _backend_cpu_ms(pid) if pid else None
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        s1 = _backend_cpu_ms(pid) if pid else None
        if s0 is not None and s1 is not None:
            srv.append(s1 - s0)
    wall.sort()
    out = {"p50_ms": round(statistics.median(wall), 2), "p95_ms": round(wall[max(0, int(len(wall) * 0.95) - 1)], 2),
           "client_cpu_p50_ms": round(statistics.median(cpu), 2)}
    if srv:  # clock ticks (10 ms): the mean over the repeats is the figure, not a percentile
        out["server_cpu_mean_ms"] = round(statistics.fmean(srv), 2)
    return out


def run(conn: psycopg.Connection, args: argparse.Namespace) -> dict[str, Any]:
    t0 = datetime(2026, 10, 1, tzinfo=UTC)
    t = time.perf_counter()
    n = conn.execute(FILL_SQL, {"t0": t0, "days": args.days, "jobs": args.jobs, "steps": args.steps,
                                "layers": LAYERS, "pods": args.pods}).rowcount
    conn.commit()
    conn.execute("ANALYZE attributions")
    fill_s = time.perf_counter() - t
    t = time.perf_counter()
    rolled = refresh(conn, overlap_s=0)
    conn.execute("VACUUM ANALYZE")  # what autovacuum does to settled days: index-only scans see the pages
    roll_s = time.perf_counter() - t
    rows = conn.execute("SELECT count(*) FROM fleet_ledger").fetchone()
    w = Window(t0, t0 + timedelta(days=args.days))
    top = ranking(conn, by="component", window=w, layer=None, kind=None, limit=20)
    pid = conn.info.backend_pid
    days = spans(w.lo, _ceil_day(w.hi))
    jobs_args = {"top": [r["component"] for r in top], "lo": w.lo, "hi": w.hi,
                 "levels": [lv for lv, _ in days], "starts": [st for _, st in days]}
    before = {r[0]: r[1] for r in conn.execute(PREVIOUS_JOBS_SQL, jobs_args).fetchall()}
    out: dict[str, Any] = {
        "jobs": args.jobs, "days": args.days, "pods": args.pods, "attributions": n, "fill_s": round(fill_s, 1),
        "roll": {"pairs": rolled.pairs, "ledger_rows": rows[0] if rows else None, "seconds": round(roll_s, 2)},
        "top3": [(r["component"], r["gpu_hours"], r["jobs"]) for r in top[:3]],
        "ranking_components": _time(lambda: ranking(conn, by="component", window=w, layer=None, kind=None,
                                                     limit=20), args.repeat, pid),
        # the part this change replaced, both ways, for the same top 20 (jobs affected must agree), each
        # unprepared as the ranking is (a prepared statement gets a generic plan)
        "top20_jobs_before_from_day_arrays": _time(
            lambda: conn.execute(PREVIOUS_JOBS_SQL, jobs_args, prepare=False).fetchall(), args.repeat, pid),
        "top20_jobs_now_from_span_jobs": _time(
            lambda: conn.execute(NEW_JOBS_SQL, jobs_args, prepare=False).fetchall(), args.repeat, pid),
        "same_jobs_affected_as_before": before == {r["component"]: r["jobs"] for r in top},
        "ranking_components_layer_link": _time(lambda: ranking(conn, by="component", window=w, layer="link",
                                                               kind=None, limit=20), args.repeat, pid),
        "ranking_layers": _time(lambda: ranking(conn, by="layer", window=w, layer=None, kind=None, limit=20),
                                args.repeat, pid),
        "incidents_top_component": _time(lambda: incidents(conn, component=top[0]["component"], window=w,
                                                           gap_steps=20, limit=100), max(3, args.repeat // 4)),
        "baseline_raw_ranking": _time(lambda: conn.execute(RAW_RANK_SQL, {"lo": w.lo, "hi": w.hi}).fetchall(),
                                      max(3, args.repeat // 8), pid),
    }
    raw_top = [r[0] for r in conn.execute(RAW_RANK_SQL, {"lo": w.lo, "hi": w.hi}).fetchall()]
    out["same_top20_as_raw"] = raw_top == [r["component"] for r in top]
    out["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: say how busy
    out["ratio_baseline_over_ledger_p50"] = round(out["baseline_raw_ranking"]["p50_ms"]
                                                  / max(out["ranking_components"]["p50_ms"], 1e-3), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--steps", type=int, default=200, help="slow steps per job")
    ap.add_argument("--pods", type=int, default=10, help="placement: a job sees 3000/pods components (1: all)")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--database-url", help="a PostgreSQL server to create the bench database on (default: embedded)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabricscope-bench-fleet-") as work:
        db = TestDatabase.create(args.database_url, Path(work) / "pg")
        try:
            with psycopg.connect(db.url, autocommit=True) as conn:
                conn.execute("SET statement_timeout = '15min'")
                out = run(conn, args)
        finally:
            db.drop()
    text = json.dumps(out, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
