"""Cost of the trend and efficiency queries over 30 days of a 1,024-rank job (issue 19).

    python bench/trends.py [--days 30] [--ranks 1024] [--fleet 200] [--repeat 20] [--database-url URL]

The rollup tables are filled directly: COPY of one row per (job, hour, op, size bucket, group size)
and a rollup_hours watermark per (job, hour), for 30 days of the big job (tp 8 x pp 4 x dp 32: 17
(op, bucket, group) series) and of a fleet of smaller jobs of 8 models (3 days each), plus one
step_rollup row per job and hour. The last hour of the big job is raw: 1,024 ranks x 360 steps of
10 s x 8 collectives, generated inside PostgreSQL (INSERT ... SELECT generate_series), then rolled
by the rollup job's own code (timed: what the background job pays per open hour). An acceptance
run per (op, group size) gives busbw_fraction and the efficiency query (service/acceptance) a
baseline.

Timed, each --repeat times, p50 and p95: the trend queries of GET /v1/trends and
/v1/trends/annotations (the service's own functions, one connection, no HTTP), the job efficiency
query (GET /v1/jobs/{job}/efficiency) over 30 days from the rollup, over 30 days with the last hour
marked again (so read raw, as the open hour of a running job is), and over the raw hour alone
(marked: what it cost before the rollup took part), and as the baseline measured in the same run
the rollup's own aggregation run as a plain SELECT over the raw hour (what answering a trend
point from raw collectives costs: per hour, so 30 days of raw rows would cost ~720 times that).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.trends import annotations as ann  # noqa: E402
from fabricscope.service.trends.queries import TrendQuery, jobs_in_scope, trend  # noqa: E402
from fabricscope.service.trends.rollup import COLLECTIVES_SELECT, FACTORS, STEPS_SELECT, roll_hour  # noqa: E402
from tests.support import TestDatabase  # noqa: E402

BIG = "big-1024"
# (op, group size, buckets): tensor-parallel all-reduces, data-parallel reduce-scatter/all-gather,
# pipeline send/recv, a small gradient-norm all-reduce, the step barrier
LAYOUT = [("all_reduce", 8, [1 << 20, 1 << 22, 1 << 24, 1 << 26]), ("reduce_scatter", 32, [1 << 26, 1 << 28, 1 << 30]),
          ("all_gather", 32, [1 << 26, 1 << 28, 1 << 30]), ("sendrecv", 2, [1 << 22, 1 << 24, 1 << 26]),
          ("all_reduce", 32, [1 << 12, 1 << 16]), ("barrier", 1024, [1])]
MODELS = ["llama-8b", "llama-70b", "llama-405b", "mixtral-8x7b", "mixtral-8x22b", "gpt-neox", "t5-xxl", "dit-xl"]


def _copy(conn: psycopg.Connection, table: str, cols: str, rows: list[tuple[Any, ...]]) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
        for r in rows:
            cp.write_row(r)


def fill_rollups(conn: psycopg.Connection, *, days: int, fleet: int, now_hour: datetime) -> dict[str, int]:
    rng = np.random.default_rng(19)
    hours = [now_hour - timedelta(hours=h) for h in range(days * 24, 0, -1)]  # the open hour is raw
    jobs: list[tuple[str, dict[str, str], list[datetime], float]] = [
        (BIG, {"model": "llama-405b", "fabric": "bench", "tp": "8", "pp": "4", "dp": "32", "world_size": "1024",
               "torch_version": "2.5.1", "nccl_version": "2.21.5"}, hours, 1.0)]
    for i in range(fleet):
        start = int(rng.integers(0, max(1, days * 24 - 72)))
        v = "2.20.5" if start < days * 12 else "2.21.5"  # an NCCL upgrade half way: annotations to find
        jobs.append((f"fleet-{i:03d}", {"model": MODELS[i % len(MODELS)], "fabric": "bench", "nccl_version": v,
                                        "torch_version": "2.5.1"}, hours[start:start + 72], 0.1 + 0.02 * (i % 8)))
    coll, steps = [], []
    for name, _labels, hs, scale in jobs:
        for h in hs:
            for op, g, buckets in LAYOUT:
                for b in buckets:
                    n = int(360 * 1024 * scale)
                    p50 = b / 40e9 * 2 + 5e-5
                    bw = None if op == "barrier" else b / p50 / 1e9 * 0.9
                    coll.append((name, h, op, b, g, n, n * p50 * 1.1, n * b, p50, p50 * 3, p50 * 6, bw,
                                 None if bw is None else bw * 0.8, 0 if bw is None else n,
                                 0.0 if bw is None else float(n * b)))
            frac = 0.18 + 0.04 * rng.random()
            rs = int(360 * 1024 * scale)
            steps.append((name, h, 360, rs, rs * 10.0, rs * 10.0 * frac, rs * 10.0 * frac * 0.6))
    with conn.transaction():
        _copy(conn, "jobs", "name, labels", [(n, json.dumps(lb)) for n, lb, _, _ in jobs])
        _copy(conn, "collective_rollup", "job, hour, op, bucket, group_size, count, sum_s, sum_bytes, p50_s, p99_s, "
                                         "p999_s, busbw_p50_gbps, busbw_p10_gbps, busbw_count, busbw_bytes", coll)
        _copy(conn, "step_rollup", "job, hour, steps, rank_steps, step_s, comm_s, exposed_comm_s", steps)
        series = sum(len(b) for _, _, b in LAYOUT)
        _copy(conn, "rollup_hours", "job, hour, collectives, steps", [(s[0], s[1], s[3] * series, s[3]) for s in steps])
    return {"jobs": len(jobs), "collective_rollup": len(coll), "step_rollup": len(steps)}


def fill_raw_hour(conn: psycopg.Connection, *, ranks: int, hour: datetime) -> dict[str, int]:
    """360 steps of 10 s on every rank, each with 8 collectives (4 TP all-reduces, a DP reduce-scatter
    and all-gather, two PP send/recv), durations log-normal around a ring at ~40 GB/s."""
    t0 = hour.timestamp()
    with conn.transaction():
        conn.execute("""
            INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s, phases)
            SELECT %(job)s, r, s, to_timestamp(%(t0)s + s * 10), to_timestamp(%(t0)s + s * 10 + 9.9), 9.9, NULL
            FROM generate_series(0, %(ranks)s - 1) r, generate_series(0, 359) s""",
                     {"job": BIG, "t0": t0, "ranks": ranks})
        conn.execute("""
            INSERT INTO collectives (job, rank, step, seq, op, bytes, start_ts, end_ts, duration_s, group_name,
                                     group_size)
            SELECT %(job)s, r, s, s * 8 + k, o.op, o.bytes, to_timestamp(%(t0)s + s * 10 + o.at),
                   to_timestamp(%(t0)s + s * 10 + o.at + d.d), d.d, o.grp, o.n
            FROM generate_series(0, %(ranks)s - 1) r, generate_series(0, 359) s,
                 (VALUES (0, 'all_reduce', 4194304::bigint, 1.0, 'tp', 8), (1, 'all_reduce', 16777216, 2.0, 'tp', 8),
                         (2, 'all_reduce', 4194304, 3.0, 'tp', 8), (3, 'all_reduce', 16777216, 4.0, 'tp', 8),
                         (4, 'reduce_scatter_tensor', 268435456, 6.0, 'dp', 32),
                         (5, 'all_gather_into_tensor', 8388608, 7.5, 'dp', 32),
                         (6, 'send', 16777216, 8.5, 'pp', 2), (7, 'recv', 16777216, 8.7, 'pp', 2))
                   AS o(k, op, bytes, at, grp, n),
                 LATERAL (SELECT o.bytes / 40e9 * 2 * exp(0.2 * sqrt(-2 * ln(random() + 1e-12))
                                 * cos(2 * pi() * random())) + 5e-5 AS d) d""",
                     {"job": BIG, "t0": t0, "ranks": ranks})
        n = conn.execute("SELECT count(*) FROM collectives WHERE job = %s", (BIG,)).fetchone()
        conn.execute("INSERT INTO rollup_pending (job, hour) VALUES (%s, %s)", (BIG, hour))
    conn.execute("ANALYZE collectives")
    conn.execute("ANALYZE steps")
    return {"raw_collectives": int(n[0]) if n else 0, "raw_steps": ranks * 360}


def baseline_runs(conn: psycopg.Connection) -> None:
    with conn.transaction():
        for op, g, buckets in LAYOUT:
            if op == "barrier":
                continue
            run = conn.execute("INSERT INTO acceptance_runs (fabric, op, ranks, nodes) VALUES ('bench', %s, %s, %s) "
                               "RETURNING id", (op, g, max(1, g // 8))).fetchone()
            assert run is not None
            for b in sorted({*buckets, 1 << 22, 1 << 24, 1 << 28, 1 << 23}):
                conn.execute("INSERT INTO acceptance_rows (run_id, size_bytes, bucket, placement, time_us, algbw_gbps, "
                             "busbw_gbps, wrong) VALUES (%s, %s, %s, 'out_of_place', 1, 1, %s, 0)",
                             (run[0], b, b, 40.0))


def timed(fn: Any, repeat: int) -> dict[str, float]:
    fn()  # warm the caches and the plan
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    a = np.array(t) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2)}


def run(conn: psycopg.Connection, args: argparse.Namespace) -> dict[str, Any]:
    from fabricscope.service.acceptance.efficiency import job_efficiency

    now = datetime.now(UTC)
    open_hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    t = time.perf_counter()
    sizes = fill_rollups(conn, days=args.days, fleet=args.fleet, now_hour=open_hour)
    sizes |= fill_raw_hour(conn, ranks=args.ranks, hour=open_hour)
    baseline_runs(conn)
    fill_s = time.perf_counter() - t
    t = time.perf_counter()
    with conn.transaction():
        conn.execute("DELETE FROM rollup_pending WHERE job = %s", (BIG,))
        roll_hour(conn, job=BIG, hour=open_hour)
    roll_s = time.perf_counter() - t
    conn.commit()
    span = (open_hour - timedelta(days=args.days), open_hour + timedelta(hours=1))
    step = 4 * 3600  # what GET /v1/trends picks for 30 days (about 200 buckets)

    def q(metric: str, **kw: Any) -> TrendQuery:
        return TrendQuery(metric=metric, from_ts=span[0], to_ts=span[1], step_s=step, **kw)

    def annotations() -> None:
        jobs = jobs_in_scope(conn, job=None, labels={}, by="model")
        ann.version_changes(jobs)
        for s in trend(conn, query=q("comm_fraction", by="model"), max_series=100)["series"]:
            ann.comm_jumps([(p["ts"], p["value"]) for p in s["points"]], threshold=0.25, window=24, min_points=3)

    def eff(a: datetime, b: datetime) -> Any:
        return lambda: job_efficiency(conn, job=BIG, fabric=None, from_ts=a, to_ts=b)

    def mark(on: bool) -> None:
        """Mark the rolled last hour as new batches would: the efficiency query reads it raw then."""
        with conn.transaction():
            if on:
                conn.execute("INSERT INTO rollup_pending (job, hour) VALUES (%s, %s)", (BIG, open_hour))
            else:
                conn.execute("DELETE FROM rollup_pending WHERE job = %s", (BIG,))

    raw = {"job": BIG, "h": open_hour, **FACTORS}
    cases = {
        "trend comm_fraction, the job, 30 d": lambda: trend(conn, query=q("comm_fraction", job=BIG), max_series=100),
        "trend exposed_comm_fraction, the job, 30 d": lambda: trend(conn, query=q("exposed_comm_fraction", job=BIG),
                                                                    max_series=100),
        "trend collective_p99_s, the job, 30 d": lambda: trend(conn, query=q("collective_p99_s", job=BIG),
                                                               max_series=100),
        "trend busbw_fraction, the job, 30 d": lambda: trend(conn, query=q("busbw_fraction", job=BIG),
                                                             max_series=100),
        f"trend comm_fraction by=model, {sizes['jobs']} jobs, 30 d": lambda: trend(
            conn, query=q("comm_fraction", by="model"), max_series=100),
        "annotations by=model, 30 d": annotations,
        "efficiency, the job, 30 d (rollup)": eff(*span),
        "efficiency, the job, 30 d, last hour marked (raw)": eff(*span),
        "efficiency, the job's raw hour (marked)": eff(open_hour, open_hour + timedelta(hours=1)),
        "BASELINE collectives per op/bucket from raw, 1 h": lambda: conn.execute(COLLECTIVES_SELECT, raw).fetchall(),
        "BASELINE comm/exposed per step from raw, 1 h": lambda: conn.execute(STEPS_SELECT, raw).fetchall(),
    }
    out: dict[str, Any] = {"sizes": sizes, "fill_s": round(fill_s, 1), "roll_open_hour_s": round(roll_s, 2),
                           "queries": {}}
    for name, fn in cases.items():
        marked = "marked" in name
        if marked:
            mark(True)
        out["queries"][name] = timed(fn, max(3, args.repeat // 4) if marked or name.startswith("BASELINE")
                                     else args.repeat)
        conn.rollback()
        if marked:
            mark(False)
        print(f"  {name}: {out['queries'][name]}", file=sys.stderr)
    base = out["queries"]["BASELINE collectives per op/bucket from raw, 1 h"]["p95_ms"]
    for r in out["queries"].values():
        r["raw_1h_baseline_over_this"] = round(base / r["p95_ms"], 1) if r["p95_ms"] else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--fleet", type=int, default=200, help="smaller jobs of 8 models, 3 days each")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--database-url", help="a PostgreSQL server to create the bench database on (default: embedded)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabricscope-bench-trends-") as work:
        db = TestDatabase.create(args.database_url, Path(work) / "pg")
        try:
            with psycopg.connect(db.url) as conn:
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
