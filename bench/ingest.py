"""Ingest throughput, one run, one database: raw COPY (baseline) vs the direct writer vs HTTP ingest.

    python bench/ingest.py [--rows 300000] [--batch 5000] [--series 2000] [--database-url URL]

Raw COPY sends pre-encoded binary rows (ids already resolved, rates already known): the most the
database can take. The direct writer does what ingest does after parsing (series lookup, rate with
wrap/reset handling, binary encoding, idempotency record). HTTP ingest adds the wire, JSON parsing
and validation: JSON bodies of `--batch` samples posted by `--clients` keep-alive connections.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.db.copybin import samples_copy_payload, stored_us  # noqa: E402
from fabricscope.service.db.frames import (  # noqa: E402
    FRAMES_COPY,
    PART_OTHER,
    PART_SCORED,
    SCORED_METRICS,
    frames_copy_payload,
)
from fabricscope.service.db.writer import SampleWriter, claim_batch  # noqa: E402
from fabricscope.service.ingest.validate import SampleColumns, labels_key  # noqa: E402
from tests.support import TestDatabase, start_service  # noqa: E402

METRICS = ["rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total", "rx_pause_frames_total"]


def make_batches(rows: int, batch: int, n_series: int, t0: float, prefix: str) -> list[list[dict[str, Any]]]:
    """``rows`` samples over ``n_series`` growing counters (one point per series per second), in batches.
    Deterministic, so benches that checksum what arrived can rebuild what was sent."""
    out: list[list[dict[str, Any]]] = []
    cur: list[dict[str, Any]] = []
    for i in range(rows):
        s, step = i % n_series, i // n_series
        cur.append({"ts": t0 + step, "source": f"{prefix}{s // len(METRICS)}:Ethernet{s % 64}",
                    "metric": METRICS[s % len(METRICS)], "value": float(step * 1000 + (s * 7919) % 997),
                    **({"labels": {"priority": "3"}} if s % len(METRICS) == 4 else {})})
        if len(cur) == batch:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def columns(batch: list[dict]) -> SampleColumns:
    """What parsing hands the writer (``validate.samples`` without the checks): columns, canonical labels."""
    return SampleColumns(np.array([s["ts"] for s in batch]), [s["source"] for s in batch],
                         [s["metric"] for s in batch], np.array([s["value"] for s in batch]),
                         [labels_key(s["labels"]) if "labels" in s else "" for s in batch], None)


def raw_payloads(batches: list[list[dict]]) -> list[tuple[bytes, bytes]]:
    """Binary COPY rows with everything already known (series ids, rates): the baseline's input, for
    `samples` and for the same samples' frames (service/db/frames.py, which the writer also stores)."""
    rng = np.random.default_rng(2)
    base = 10_000_000
    out = []
    for b in batches:
        ts, sid = np.array([s["ts"] for s in b]), base + np.arange(len(b), dtype=np.int64) % 2000
        value, rate = np.array([s["value"] for s in b]), rng.random(len(b)) * 100
        part = np.array([PART_SCORED if s["metric"] in SCORED_METRICS else PART_OTHER for s in b], np.int8)
        out.append((samples_copy_payload(ts, sid, value, rate),
                    frames_copy_payload(stored_us(ts), sid, rate, part=part)))
    return out


def bench_raw_and_writer(url: str, raw_batches: list[list[dict]], w_batches: list[list[dict]],
                         writer: SampleWriter) -> tuple[float, float, float]:
    """Rows/s of raw COPY (samples alone, then samples and their frames) and of the direct writer, one
    batch of each in turn (each on its own connection), so that the machine's drift (other tenants,
    the table growing) hits all alike."""
    payloads = raw_payloads(raw_batches)
    cols = [columns(b) for b in w_batches]
    t_raw = t_frames = t_wr = 0.0
    copy_sql = "COPY samples (ts, series_id, value, rate) FROM STDIN (FORMAT BINARY)"
    with psycopg.connect(url) as rc, psycopg.connect(url) as wc:
        for (p, f), c in zip(payloads, cols, strict=True):
            t = time.perf_counter()
            with rc.transaction(), rc.cursor() as cur, cur.copy(copy_sql) as cp:
                cp.write(p)
            t_raw += time.perf_counter() - t
            t = time.perf_counter()
            with rc.transaction(), rc.cursor() as cur:
                with cur.copy(copy_sql) as cp:
                    cp.write(p)
                with cur.copy(FRAMES_COPY) as cp:
                    cp.write(f)
            t_frames += time.perf_counter() - t
            t = time.perf_counter()
            with wc.transaction():
                claim_batch(wc, batch_id=uuid.uuid4().hex, kind="samples", accepted=len(c))
                w = writer.write_samples(wc, c)
            writer.committed(w)
            t_wr += time.perf_counter() - t
    n_raw = sum(len(b) for b in raw_batches)
    return n_raw / t_raw, n_raw / t_frames, sum(len(c) for c in cols) / t_wr


def post_bodies(base_url: str, bodies: list[bytes], clients: int, timeout_s: float = 120) -> None:
    """POST JSON bodies to /v1/ingest/samples from ``clients`` keep-alive connections (threads)."""
    host, port = base_url.removeprefix("http://").split(":")
    errors: list[str] = []

    def worker(mine: list[bytes]) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        for body in mine:
            conn.request("POST", "/v1/ingest/samples", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status != 200:
                errors.append(f"{r.status} {data[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=worker, args=(bodies[i::clients],)) for i in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise SystemExit(f"HTTP ingest errors: {errors[:3]}")


def bench_http(base_url: str, batches: list[list[dict]], clients: int) -> float:
    bodies = [orjson.dumps({"batch_id": uuid.uuid4().hex, "samples": b}) for b in batches]
    rows = sum(len(b) for b in batches)
    # Warm the series dictionary so every mode measures steady state, like raw COPY.
    post_bodies(base_url, bodies[:1], 1)
    t = time.perf_counter()
    post_bodies(base_url, bodies[1:], clients)
    dt = time.perf_counter() - t
    return (rows - len(batches[0])) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--database-url", default=None, help="a server to use (default: embedded PostgreSQL)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fabricscope-bench-"))
    print(f"setting up a database ({'embedded PostgreSQL' if not args.database_url else 'given server'}) ...",
          flush=True)
    db = TestDatabase.create(args.database_url, work)
    svc = None
    try:
        t0 = time.time() - 86_400
        print(f"{args.rows:,} samples in batches of {args.batch:,} over {args.series:,} series", flush=True)
        # Writer and HTTP see the same shape of data under different source names (fresh series each).
        # First a pass that creates the writer's series (a one-off per series): steady state is measured.
        writer = SampleWriter()
        bench_raw_and_writer(db.url, make_batches(args.batch, args.batch, args.series, t0 - 10_000, "raw"),
                             make_batches(args.series, args.batch, args.series, t0, "wr"), writer)
        raw, raw_f, wr = bench_raw_and_writer(
            db.url, make_batches(args.rows, args.batch, args.series, t0, "raw"),
            make_batches(args.rows, args.batch, args.series, t0 + 10_000, "wr"), writer)
        print(f"  raw COPY      {raw:>12,.0f} rows/s   1.00x (baseline; batches alternate with the writer's)",
              flush=True)
        print(f"  + frames      {raw_f:>12,.0f} rows/s   {raw_f / raw:.2f}x   (raw COPY of the samples and their "
              "frames: what the writer stores)", flush=True)
        print(f"  direct writer {wr:>12,.0f} rows/s   {wr / raw:.2f}x   ({wr / raw_f:.2f}x of raw COPY with frames; "
              "target >= 0.80x of it)", flush=True)
        svc = start_service(db.url, work)
        hb = make_batches(args.rows, args.batch, args.series, t0 + 20_000, "http")
        hr = bench_http(svc.url, hb, args.clients)
        print(f"  HTTP ingest   {hr:>12,.0f} samples/s {hr / raw:.2f}x   (target >= 0.50x, "
              f"{args.clients} clients, JSON batches of {args.batch:,})", flush=True)
    finally:
        if svc is not None:
            svc.stop()
        db.drop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
