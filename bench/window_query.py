"""Cost of the step-window telemetry queries (queries.outliers + queries.history, #15 item 3) per step,
against the same queries of another revision on the same data.

Loads one simulated job per size straight into a fresh database (COPY, no API), then times both
versions on every step's window, interleaved so machine load falls on both alike.

    .venv/bin/python bench/window_query.py --sizes 256,1024 --against 113a56a
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.attribution import LATENCY_CLUSTERS  # noqa: E402
from fabricscope.service.correlate import AttributionEngine  # noqa: E402
from fabricscope.service.correlate import queries as q  # noqa: E402
from fabricscope.service.simulate.generator import generate  # noqa: E402
from fabricscope.service.simulate.send import DirectSink, send_scenario  # noqa: E402


def sql_of(rev: str) -> tuple[str, str]:
    """OUTLIERS_SQL and HIST_SQL as they were at `rev` (the module's text, its imports left out)."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:service/correlate/queries.py"],
                          capture_output=True, text=True, check=True).stdout
    ns: dict[str, Any] = {}
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith(("from fabricscope", "import pandas")))
    exec(compile(body.replace("from __future__ import annotations", ""), rev, "exec"), ns)  # noqa: S102
    return ns["OUTLIERS_SQL"], ns["HIST_SQL"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--against", default=None, help="git revision to compare with (default: none)")
    args = ap.parse_args()
    from tests.support import TestDatabase

    versions = {"this": (q.OUTLIERS_SQL, q.HIST_SQL)}
    if args.against:
        versions[args.against] = sql_of(args.against)
    db = TestDatabase.create(None, Path(tempfile.mkdtemp(prefix="fs-bench-win-")))
    conn = psycopg.connect(db.url, autocommit=True)
    engine = AttributionEngine()
    try:
        for i, n in enumerate(int(x) for x in args.sizes.split(",")):
            sc = generate(LATENCY_CLUSTERS[n], job=f"win-{n}", steps=args.steps, faults=2, seed=7 + n,
                          t0=1.6e9 + i * 86400.0)
            send_scenario(DirectSink(conn), sc)
            conn.execute("ANALYZE samples; ANALYZE series")
            _, _, meta = engine._job_topo(conn, sc.job)
            ms: dict[str, list[float]] = {k: [] for k in versions}
            for rep in range(2):  # the first pass warms caches and reaches the cached (generic) plans
                for s in range(2, args.steps):
                    ws = sc.t0 + float(sc.timeline.start[s].min())
                    d = float(sc.timeline.end[s].max()) + sc.t0 - ws
                    we = ws + d + min(max(0.5 * d, 1.0), 5.0)
                    for tag, (o_sql, h_sql) in versions.items():
                        q.OUTLIERS_SQL, q.HIST_SQL = o_sql, h_sql
                        t = time.perf_counter()
                        out, _ = q.outliers(conn, meta=meta, ws=ws, we=we)
                        q.history(conn, ids=[int(x) for x in out["series_id"]], hs=ws - 90.0, he=ws - 0.5)
                        if rep:
                            ms[tag].append(1000 * (time.perf_counter() - t))
            q.OUTLIERS_SQL, q.HIST_SQL = versions["this"]
            base = ms.get(args.against or "", [])
            for tag, v in ms.items():
                p50, p95 = np.percentile(v, [50, 95])
                ratio = f"  x{p50 / np.percentile(base, 50):.2f} p50" if base and tag != args.against else ""
                print(f"{n:5d} ranks {len(meta):6d} series  {tag:>10}: p50 {p50:7.1f} ms  p95 {p95:7.1f} ms{ratio}",
                      flush=True)
    finally:
        conn.close()
        db.drop()  # stops an embedded server too


if __name__ == "__main__":
    main()
