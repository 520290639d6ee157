"""TimescaleDB, measured (#47): compression of `samples` and `collectives`, ingest into a hypertable
against a plain table, and attribution over compressed against uncompressed chunks. One run, one
database (the embedded PostgreSQL with TimescaleDB installed, or --database-url), ratios within it.

    python bench/timescale.py [--hosts 8] [--steps 240] [--rows 400000] [--reps 2]

The data is the cluster simulator's (service/simulate: counters, rates, steps, collectives of a job
with faults), written as ingest stores it, five days old so the compression policy takes it.
Attribution is timed step by step (every step of the job, a fresh engine each pass), the passes
alternating uncompressed / compressed (decompress_chunk between) so drift hits both alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.correlate import AttributionEngine  # noqa: E402
from fabricscope.service.db.copybin import samples_copy_payload  # noqa: E402
from fabricscope.service.simulate.generator import generate  # noqa: E402
from fabricscope.service.simulate.send import DirectSink, send_scenario  # noqa: E402
from fabricscope.service.simulate.topology import ClusterSpec  # noqa: E402
from tests.support import TestDatabase  # noqa: E402

TABLES = ("samples", "collectives")


def _one(conn: psycopg.Connection, sql: str, *args: object) -> float:
    row = conn.execute(sql, args).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def run_policies(conn: psycopg.Connection) -> None:
    for t in TABLES:
        jid = _one(conn, """SELECT job_id FROM timescaledb_information.jobs
                            WHERE proc_name = 'policy_compression' AND hypertable_name = %s""", t)
        conn.execute("CALL run_job(%s)", (int(jid),))


def decompress(conn: psycopg.Connection) -> None:
    for t in TABLES:
        conn.execute("SELECT decompress_chunk(c, if_compressed => TRUE) FROM show_chunks(%s::regclass) c", (t,))


def compression(conn: psycopg.Connection) -> dict[str, tuple[int, float, float]]:
    """Per table: rows, bytes/row before and after compression (heap + indexes + toast)."""
    out = {}
    for t in TABLES:
        rows = int(_one(conn, f"SELECT count(*) FROM {t}"))
        row = conn.execute("""SELECT sum(before_compression_total_bytes), sum(after_compression_total_bytes)
                              FROM hypertable_compression_stats(%s::regclass)""", (t,)).fetchone()
        before, after = (float(row[0]), float(row[1])) if row and row[0] else (0.0, 0.0)
        out[t] = (rows, before / max(rows, 1), after / max(rows, 1))
    return out


def attribution_p95(conn: psycopg.Connection, job: str, steps: int) -> tuple[float, float]:
    engine = AttributionEngine()
    times = []
    for s in range(steps):
        t = time.perf_counter()
        engine.attribute_step(conn, job=job, step=s, store=False)
        times.append(time.perf_counter() - t)
    return float(np.percentile(times, 95)), float(np.median(times))


def ingest(conn: psycopg.Connection, rows: int, batch: int) -> tuple[float, float]:
    """Rows/s of binary COPY into `samples` (hypertable) and into a plain copy of it, batch by batch in turn."""
    conn.execute("CREATE TABLE IF NOT EXISTS bench_plain_samples (LIKE samples INCLUDING ALL)")
    rng = np.random.default_rng(4)
    n_series, t0 = 2000, time.time() - 3600
    t_hyper = t_plain = 0.0
    for i in range(0, rows, batch):
        k = np.arange(i, i + batch)
        ts = t0 + (k // n_series).astype(float)
        sid = (20_000_000 + k % n_series).astype(np.int64)
        payload = samples_copy_payload(ts, sid, (k // n_series) * 1000.0, rng.random(batch) * 100)
        for table in ("samples", "bench_plain_samples"):
            t = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur, \
                    cur.copy(f"COPY {table} (ts, series_id, value, rate) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(payload)
            if table == "samples":
                t_hyper += time.perf_counter() - t
            else:
                t_plain += time.perf_counter() - t
    n = (rows // batch) * batch
    return n / t_hyper, n / t_plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--rows", type=int, default=400_000, help="ingest rows per table")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=2, help="uncompressed/compressed attribution pass pairs")
    ap.add_argument("--database-url", default=None, help="a server with TimescaleDB (default: embedded)")
    a = ap.parse_args()
    db = TestDatabase.create(a.database_url, Path(tempfile.mkdtemp()))
    try:
        assert db.flavour is not None
        print(f"database: {db.flavour.describe()}")
        if not db.flavour.timescaledb:
            sys.exit("no TimescaleDB on this server: ../shared/timescaledb/install.sh PG_CONFIG installs it")
        spec = ClusterSpec(hosts=a.hosts, gpus_per_host=8, nics_per_host=8, leaves=min(4, a.hosts), spines=2)
        sc = generate(spec, job="bench-ts", steps=a.steps, faults=8, seed=5, t0=time.time() - 5 * 86400)
        with psycopg.connect(db.url, autocommit=True) as conn:
            t = time.perf_counter()
            send_scenario(DirectSink(conn), sc)
            print(f"scenario: {a.hosts * 8} ranks, {a.steps} steps, written in {time.perf_counter() - t:.0f} s")
            conn.execute("VACUUM ANALYZE")
            p95 = {"uncompressed": [], "compressed": []}
            for rep in range(a.reps):
                if rep:
                    decompress(conn)
                conn.execute("ANALYZE")
                p95["uncompressed"].append(attribution_p95(conn, sc.job, a.steps))
                run_policies(conn)
                conn.execute("ANALYZE")
                if rep == 0:
                    for t_name, (rows, before, after) in compression(conn).items():
                        print(f"{t_name}: {rows:,} rows, {before:.1f} -> {after:.1f} bytes/row "
                              f"(ratio {before / after:.1f}x)")
                p95["compressed"].append(attribution_p95(conn, sc.job, a.steps))
            u = min(x[0] for x in p95["uncompressed"])
            c = min(x[0] for x in p95["compressed"])
            print(f"attribution p95 over {a.steps} steps: uncompressed {u * 1000:.1f} ms, compressed {c * 1000:.1f} ms "
                  f"(ratio {c / u:.2f}); medians {[round(x[1] * 1000, 1) for x in p95['uncompressed']]} / "
                  f"{[round(x[1] * 1000, 1) for x in p95['compressed']]} ms")
            hyper, plain = ingest(conn, a.rows, a.batch)
            print(f"ingest (binary COPY, {a.rows:,} rows each, batches of {a.batch:,} in turn): hypertable "
                  f"{hyper:,.0f} rows/s, plain table {plain:,.0f} rows/s (ratio {hyper / plain:.2f})")
    finally:
        db.drop()


if __name__ == "__main__":
    main()
