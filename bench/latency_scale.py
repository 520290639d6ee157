"""Latency at scale for bench/attribution.py: a bulk loader for jobs too large to send through the
ingest API on a small machine, and the engine process whose latency and memory are measured.

`bulk_load` writes a simulated scenario with a few large COPYs (binary for the samples: 4,096 ranks
are ~10 M samples; the HTTP ingest path and DirectSink's per-batch CSV take tens of minutes for that
on 2 cores). Rates are computed as the ingest path does (fabricscope.core.rates).

`python bench/latency_scale.py DATABASE_URL JOB STEPS` is the engine process: a fresh Python
process with one AttributionEngine, as the service runs it. It attributes step 0 first (the job's
topology cache is then warm, as in a running service), then every step in order with store=True,
and prints one JSON line: per-step milliseconds, which steps were slow, and its peak RSS.
"""

from __future__ import annotations

import io
import json
import os
import resource
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.core.rates import series_rates  # noqa: E402
from fabricscope.service.db.copybin import stored_us  # noqa: E402
from fabricscope.service.db.frames import INCREMENT_METRICS, SCORED_METRICS, write_frames  # noqa: E402
from fabricscope.service.simulate.generator import Scenario  # noqa: E402
from fabricscope.service.simulate.send import DirectSink  # noqa: E402

_PG_EPOCH = 946684800.0  # 2000-01-01 UTC: PostgreSQL's binary timestamps count microseconds from it


def _series_ids(cur: Any, sc: Scenario) -> np.ndarray:
    """Database ids of the scenario's series (created when missing), aligned with sc.streams."""
    st = sc.streams
    labels = [json.dumps(x or {}, sort_keys=True) for x in st.labels]
    keys = pd.DataFrame({"source": st.sources, "metric": st.metrics, "labels": labels})
    srcs = keys["source"].drop_duplicates()
    cur.executemany("INSERT INTO sources (name, device, interface) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    [(s, s.partition(":")[0], s.partition(":")[2] or None) for s in srcs])
    cur.executemany("INSERT INTO metrics (name, kind) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    [(m, "counter" if m.endswith("_total") else "gauge") for m in keys["metric"].unique()])
    cur.execute("CREATE TEMP TABLE bulk_series (source text, metric text, labels jsonb) ON COMMIT DROP")
    with cur.copy("COPY bulk_series FROM STDIN") as cp:
        for row in keys.itertuples(index=False):
            cp.write_row(row)
    cur.execute("INSERT INTO series (source_id, metric_id, labels) SELECT s.id, m.id, b.labels FROM bulk_series b "
                "JOIN sources s ON s.name = b.source JOIN metrics m ON m.name = b.metric ON CONFLICT DO NOTHING")
    cur.execute("SELECT se.id, s.name, m.name, se.labels::text FROM series se JOIN sources s ON s.id = se.source_id "
                "JOIN metrics m ON m.id = se.metric_id WHERE s.name = ANY(%s)", (list(srcs),))
    ids = {(s, m, json.dumps(json.loads(lab), sort_keys=True)): i for i, s, m, lab in cur.fetchall()}
    return np.array([ids[k] for k in zip(keys["source"], keys["metric"], keys["labels"], strict=True)])


def _copy_samples(cur: Any, ts: np.ndarray, sid: np.ndarray, value: np.ndarray, rate: np.ndarray | None) -> None:
    """COPY ... (FORMAT binary) of rows with a fixed layout (rate: all present, or None for NULL)."""
    n_fields = 3 if rate is None else 4
    fields = [("n", ">i2"), ("lt", ">i4"), ("ts", ">i8"), ("ls", ">i4"), ("sid", ">i4"), ("lv", ">i4"),
              ("v", ">f8")] + ([] if rate is None else [("lr", ">i4"), ("r", ">f8")])
    rows = np.zeros(len(ts), dtype=fields)
    rows["n"], rows["lt"], rows["ls"], rows["lv"] = n_fields, 8, 4, 8
    rows["ts"] = np.round((ts - _PG_EPOCH) * 1e6).astype(np.int64)
    rows["sid"], rows["v"] = sid, value
    if rate is not None:
        rows["lr"], rows["r"] = 8, rate
    cols = "ts, series_id, value" + ("" if rate is None else ", rate")
    buf = io.BytesIO()
    buf.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
    buf.write(rows.tobytes())
    buf.write(struct.pack(">h", -1))
    with cur.copy(f"COPY samples ({cols}) FROM STDIN (FORMAT binary)") as cp:
        cp.write(buf.getbuffer())


def bulk_load(conn: Any, sc: Scenario, progress: Any = print) -> int:
    """Topology, placement, samples, steps, collectives and events of `sc` into the database of `conn`
    (a fresh job: no earlier samples of its series). Returns the number of samples written."""
    sink = DirectSink(conn)
    sink.put_topology(sc.topology_body())
    sink.put_job(sc.job, sc.job_body())
    st = sc.streams
    with conn.transaction(), conn.cursor() as cur:
        ids = _series_ids(cur, sc)
    row, col = np.nonzero(st.keep)
    sid = ids[row].astype(np.int64)
    ts = st.ts[row, col] + sc.t0
    val = st.values[row, col].astype(float)
    counter = np.array([k == "counter" for k in st.kinds])[row]
    order, rates = series_rates(sid, ts, val, np.full(len(ts), np.nan), np.full(len(ts), np.nan))
    rate = np.full(len(ts), np.nan)
    rate[order] = rates
    rate[~counter] = np.nan
    progress(f"    {len(ts)} samples of {len(ids)} series: copying")
    with conn.transaction(), conn.cursor() as cur:
        for has in (True, False):  # each part in time order, as collectors send them
            pick = np.flatnonzero(~np.isnan(rate) == has)
            pick = pick[np.argsort(ts[pick], kind="stable")]
            _copy_samples(cur, ts[pick], sid[pick], val[pick], rate[pick] if has else None)
        # The frames the ingest writer would have written (service/db/frames.py), one per device and
        # second as its agent's or switch poller's writes would give, and the link-down increments.
        progress("    frames and increments")
        device = pd.factorize(pd.Series([s.partition(":")[0] for s in st.sources]))[0][row]
        metric = np.array(st.metrics, dtype=object)[row]
        increment = counter & np.isin(metric, list(INCREMENT_METRICS))
        scored = np.isin(metric, list(SCORED_METRICS))
        o = np.argsort(ts, kind="stable")
        write_frames(cur, stored_us(ts[o]), sid[o], val[o], rate[o], counter[o], increment[o], group=device[o],
                     is_scored=scored[o])
    for kind, rows in (("steps", sc.steps_payload()), ("collectives", sc.collectives_payload()),
                       ("events", sc.events_payload())):
        for i in range(0, len(rows), 50_000):
            sink.post(kind, {"job": sc.job, kind: rows[i:i + 50_000]})
    return len(ts)


def _backend_cpu_s(pid: int | None) -> float:
    """CPU seconds the database backend `pid` has used (None or not on this machine: 0): the engine's
    cost without the other processes of a shared machine, whose load inflates wall-clock time."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def engine_process(db_url: str, job: str, steps: int) -> dict[str, Any]:
    import psycopg

    from fabricscope.service.correlate import AttributionEngine

    engine = AttributionEngine()
    with psycopg.connect(db_url, autocommit=True) as conn:
        backend = conn.info.backend_pid if conn.info.host in ("127.0.0.1", "localhost", "::1") else None
        t = time.perf_counter()
        engine.attribute_step(conn, job=job, step=0, store=False)  # the service's caches are warm
        cold_ms = (time.perf_counter() - t) * 1000
        lat, cpu, slow = [], [], []
        for s in range(steps):
            t, c = time.perf_counter(), time.process_time() + _backend_cpu_s(backend)
            a = engine.attribute_step(conn, job=job, step=s)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() + _backend_cpu_s(backend) - c) * 1000)
            slow.append(bool(a and a["slow"]))
    return {"ms": lat, "cpu_ms": cpu, "slow": slow, "cold_ms": cold_ms, "rss_mib": _peak_rss_mib()}


def _peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: that one survives fork and exec, so a
    child of the benchmark (which holds the generated scenarios, 2.5 GB at 4,096 ranks) would report
    its parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


if __name__ == "__main__":
    print(json.dumps(engine_process(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
