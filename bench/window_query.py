"""Cost of the step-window telemetry queries (queries.outliers + queries.history, #15 item 3) per step,
against the same functions of another revision (its queries.py and the correlate modules that one
imports) on the same data, and whether the two answer the same to the bit.

Loads one simulated job per size straight into a fresh database (COPY, no API), then times both
versions on every step's window, interleaved so machine load falls on both alike.

    .venv/bin/python bench/window_query.py --sizes 256,1024 --against 113a56a
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.attribution import LATENCY_CLUSTERS  # noqa: E402
from fabricscope.service.correlate import AttributionEngine  # noqa: E402
from fabricscope.service.correlate import queries as q  # noqa: E402
from fabricscope.service.simulate.generator import generate  # noqa: E402
from fabricscope.service.simulate.send import DirectSink, send_scenario  # noqa: E402

_IMPORT = re.compile(r"^from fabricscope\.service\.correlate(?:\.(\w+))? import (\([^)]*\)|[^\n]*)$", re.M)


def queries_of(rev: str) -> types.ModuleType:
    """fabricscope.service.correlate.queries as it was at `rev`, with the correlate modules it imports
    (constants, window, ...) as they were there too; the rest (numpy, pandas) is this process's."""
    loaded: dict[str, types.ModuleType] = {}

    def load(name: str) -> types.ModuleType:
        if name in loaded:
            return loaded[name]
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:service/correlate/{name}.py"],
                              capture_output=True, text=True, check=True).stdout
        mod = loaded[name] = types.ModuleType(f"rev_{rev}_{name}")
        sys.modules[mod.__name__] = mod  # dataclasses look their module up
        for m in _IMPORT.finditer(text):  # `from ...correlate(.x) import a, b as c`: rev's x.a, rev's b
            for item in m.group(2).strip("()").replace("\n", " ").split(","):
                orig, _, alias = item.strip().partition(" as ")
                if orig:
                    mod.__dict__[alias or orig] = getattr(load(m.group(1)), orig) if m.group(1) else load(orig)
        exec(compile(_IMPORT.sub("", text), f"{rev}:{name}.py", "exec"), mod.__dict__)  # noqa: S102
        return mod

    return load("queries")


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two outliers() answers hold the same series with the same values, to the bit."""
    cols = ["series_id", "cur", "peer_med", "peer_mad", "peer_z", "cur_w"]
    a, b = (x[cols].sort_values("series_id").to_numpy(float) for x in (a, b))
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--against", default=None, help="git revision to compare with (default: none)")
    args = ap.parse_args()
    from tests.support import TestDatabase

    versions: dict[str, Any] = {"this": q}
    if args.against:
        versions[args.against] = queries_of(args.against)
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
            arrays = {k: m.scoring_arrays(meta) for k, m in versions.items()}
            differ = 0
            for rep in range(2):  # the first pass warms caches and reaches the cached (generic) plans
                for s in range(2, args.steps):
                    ws = sc.t0 + float(sc.timeline.start[s].min())
                    d = float(sc.timeline.end[s].max()) + sc.t0 - ws
                    we = ws + d + min(max(0.5 * d, 1.0), 5.0)
                    got = []
                    for tag, m in (versions.items() if s % 2 else reversed(versions.items())):
                        t = time.perf_counter()
                        out, have = m.outliers(conn, meta=meta, ws=ws, we=we, arrays=arrays[tag])
                        m.history(conn, ids=[int(x) for x in out["series_id"]], hs=ws - 90.0, he=ws - 0.5)
                        if rep:
                            ms[tag].append(1000 * (time.perf_counter() - t))
                        got.append((out, have))
                    differ += len(got) > 1 and not (got[0][1] == got[1][1] and same(got[0][0], got[1][0]))
            if differ:
                print(f"{n:5d} ranks: the two versions' answers differ in {differ} windows", flush=True)
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
