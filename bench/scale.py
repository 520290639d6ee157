"""Scale-out benchmark, one run: direct HTTP ingest (baseline) vs NATS JetStream + 1 and 2 writers,
then the memory of every process under a burst 10x the steady rate.

    python bench/scale.py [--rows 200000] [--batch 5000] [--series 2000] [--steady 2000] [--database-url URL]

Throughput is end to end: from the first byte a producer sends to the last row committed (and
visible in ``sample_view``). Direct: ``--clients`` keep-alive HTTP clients POST JSON batches to the
API, which writes them (each 200 means committed). NATS: a producer publishes the same batches to
JetStream (gzip, with batch ids, waiting for each PubAck) while ``fabricscope writer`` processes,
already running, consume them; the clock stops when the database holds every row.

Burst: ``--steady`` samples/s for ``--phase-s`` seconds, then 10x that for as long, then the drain;
RSS of each process (API, writers, nats-server) is sampled every 0.1 s. Direct mode gets the same
offered load over ``--burst-clients`` connections. Everything runs on this machine (the database
too), so the ratios, not the absolute numbers, are what carries over (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import nats
import orjson
import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import make_batches  # noqa: E402
from bench.ingest import post_bodies as post_all  # noqa: E402
from fabricscope.service.bus import codec  # noqa: E402
from tests.bus.natsd import NatsServer, declare_streams  # noqa: E402
from tests.support import REPO, TestDatabase, start_service  # noqa: E402


def count(url: str, prefix: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM sample_view WHERE source LIKE %s", (prefix + "%",)).fetchone()
    return int(row[0]) if row else 0


def wait_rows(url: str, prefix: str, n: int, timeout_s: float = 120) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if count(url, prefix) >= n:
            return time.perf_counter()
        time.sleep(0.05)
    raise SystemExit(f"only {count(url, prefix)} of {n} rows arrived in {timeout_s}s")


# -- producers ---------------------------------------------------------------------------------------
async def publish_all(url: str, messages: list[tuple[str, bytes, dict[str, str]]], window: int = 8) -> None:
    """Publish with up to ``window`` PubAcks outstanding (what a sink with a few threads does)."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    sem = asyncio.Semaphore(window)

    async def one(m: tuple[str, bytes, dict[str, str]]) -> None:
        async with sem:
            await js.publish(m[0], m[1], headers=m[2])

    await asyncio.gather(*(one(m) for m in messages))
    await nc.close()


def encode_all(batches: list[list[dict[str, Any]]]) -> list[tuple[str, bytes, dict[str, str]]]:
    return [codec.encode("samples", {"batch_id": uuid.uuid4().hex, "samples": b}) for b in batches]


# -- processes ---------------------------------------------------------------------------------------
class Writers:
    def __init__(self, db_url: str, nats_url: str, log_dir: Path) -> None:
        self.db_url, self.nats_url, self.log_dir = db_url, nats_url, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, n: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
        env.update({"DATABASE_URL": self.db_url, "FABRICSCOPE_NATS_URL": self.nats_url,
                    "FABRICSCOPE_DATA_DIR": str(self.log_dir / "data"), "FABRICSCOPE_LOG_LEVEL": "WARNING"})
        for i in range(n):
            log = (self.log_dir / f"writer{len(self.procs)}.log").open("ab")
            self.procs.append(subprocess.Popen([sys.executable, "-m", "fabricscope.service.bus.cli",
                                                "--name", f"bench-w{i}"],
                                               cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()


class RssSampler(threading.Thread):
    """Peak RSS per named process, per phase (the phase name is switched by the caller)."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.phase = "idle"
        self.peak: dict[tuple[str, str], int] = {}
        self.stop_ev = threading.Event()

    def run(self) -> None:
        while not self.stop_ev.wait(0.1):
            for name, p in self.procs.items():
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                key = (name, self.phase)
                self.peak[key] = max(self.peak.get(key, 0), rss)


# -- the measurements --------------------------------------------------------------------------------
def throughput(args: argparse.Namespace, db: TestDatabase, srv: NatsServer, svc_url: str, work: Path) -> None:
    t0 = time.time() - 86_400

    def batches(prefix: str) -> list[list[dict[str, Any]]]:
        return make_batches(args.rows, args.batch, args.series, t0, prefix)

    # Every mode first writes one batch of its series (series creation is a one-off), then is timed.
    b = batches("direct")
    post_all(svc_url, [orjson.dumps({"batch_id": uuid.uuid4().hex, "samples": b[0]})], 1)
    bodies = [orjson.dumps({"batch_id": uuid.uuid4().hex, "samples": x}) for x in b[1:]]
    n = sum(len(x) for x in b[1:])
    t = time.perf_counter()
    post_all(svc_url, bodies, args.clients)
    direct = n / (time.perf_counter() - t)
    print(f"  direct HTTP ingest      {direct:>10,.0f} samples/s  1.00x (baseline; {args.clients} clients)", flush=True)

    results = {}
    for nw in (1, 2):
        prefix = f"nats{nw}w"
        b = batches(prefix)
        w = Writers(db.url, srv.url, work)
        w.start(nw)
        try:
            asyncio.run(publish_all(srv.url, encode_all(b[:1])))
            wait_rows(db.url, prefix, len(b[0]))
            msgs = encode_all(b[1:])
            n = sum(len(x) for x in b[1:])
            t = time.perf_counter()
            asyncio.run(publish_all(srv.url, msgs))
            t_pub = time.perf_counter()
            t_end = wait_rows(db.url, prefix, len(b[0]) + n)
            results[nw] = n / (t_end - t)
            print(f"  NATS + {nw} writer{'s' if nw > 1 else ' '}        {results[nw]:>10,.0f} samples/s  "
                  f"{results[nw] / direct:.2f}x  (publishing the pre-encoded batches alone: "
                  f"{n / (t_pub - t):,.0f}/s)", flush=True)
        finally:
            w.stop()
    print(f"  2 writers / 1 writer: {results[2] / results[1]:.2f}x on {psutil.cpu_count()} CPUs shared with "
          "PostgreSQL, NATS and the producer", flush=True)


def burst(args: argparse.Namespace, db: TestDatabase, srv: NatsServer, svc_url: str, work: Path,
          svc_pid: int) -> None:
    steady, phase_s, batch = args.steady, args.phase_s, 1000
    t0 = time.time() - 3 * 86_400

    def schedule(prefix: str) -> list[tuple[float, list[dict[str, Any]]]]:
        """(send time offset, batch): steady, then 10x steady, each for phase_s seconds."""
        n_steady, n_burst = int(steady * phase_s), int(10 * steady * phase_s)
        b = make_batches(n_steady + n_burst, batch, args.series, t0, prefix)
        out, sent = [], 0
        for x in b:
            at = sent / steady if sent < n_steady else phase_s + (sent - n_steady) / (10 * steady)
            out.append((at, x))
            sent += len(x)
        return out

    def run(label: str, prefix: str, send: Any, sampler: RssSampler) -> None:
        sched = schedule(prefix)
        total = sum(len(x) for _, x in sched)
        start = time.perf_counter()
        sampler.start()
        sampler.phase = "steady"
        send(sched, start, sampler)
        sent_end = time.perf_counter()
        sampler.phase = "drain"
        wait_rows(db.url, prefix, total)
        done = time.perf_counter()
        sampler.stop_ev.set()
        sampler.join()
        print(f"  {label}: {total:,} samples offered in {sent_end - start:.1f}s; all committed "
              f"{done - start:.1f}s after the start (lag after the burst {done - sent_end:.1f}s)", flush=True)
        names = sorted({k[0] for k in sampler.peak})
        for name in names:
            cols = [f"{ph} {sampler.peak[(name, ph)] / 2**20:6.0f} MiB" if (name, ph) in sampler.peak
                    else f"{ph}      - MiB" for ph in ("steady", "burst", "drain")]
            print(f"      {name:<12} RSS peak  " + "   ".join(cols), flush=True)

    # Direct: the offered load goes to the API over --burst-clients connections, paced by the schedule.
    def send_http(sched: list[tuple[float, list[dict[str, Any]]]], start: float, sampler: RssSampler) -> None:
        host, port = svc_url.removeprefix("http://").split(":")
        lock = threading.Lock()
        queue = list(sched)

        def worker() -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=300)
            while True:
                with lock:
                    if not queue:
                        break
                    at, b = queue.pop(0)
                delay = start + at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                if at >= phase_s:
                    sampler.phase = "burst"
                body = orjson.dumps({"batch_id": uuid.uuid4().hex, "samples": b})
                for _ in range(5):  # the API closes idle keep-alive connections: reconnect, resend
                    try:
                        conn.request("POST", "/v1/ingest/samples", headers={"Content-Type": "application/json"},
                                     body=body)
                        conn.getresponse().read()
                        break
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        conn = http.client.HTTPConnection(host, int(port), timeout=300)
            conn.close()

        threads = [threading.Thread(target=worker) for _ in range(args.burst_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    run(f"direct, steady {steady:,}/s then burst {10 * steady:,}/s", "bdirect", send_http,
        RssSampler({"api": svc_pid}))

    # NATS: the producer publishes on schedule (never waits for the database); 2 writers drain.
    w = Writers(db.url, srv.url, work)
    w.start(2)
    try:
        def send_nats(sched: list[tuple[float, list[dict[str, Any]]]], start: float, sampler: RssSampler) -> None:
            async def go() -> None:
                nc = await nats.connect(srv.url)
                js = nc.jetstream(timeout=30)
                for at, b in sched:
                    delay = start + at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if at >= phase_s:
                        sampler.phase = "burst"
                    subj, data, headers = codec.encode("samples", {"batch_id": uuid.uuid4().hex, "samples": b})
                    await js.publish(subj, data, headers=headers)
                await nc.close()

            asyncio.run(go())

        # Warm the writers' series caches like the direct path's.
        asyncio.run(publish_all(srv.url, encode_all(make_batches(args.series, args.series, args.series,
                                                                 t0 - 100, "bnats"))))
        wait_rows(db.url, "bnats", args.series)
        pids = {"nats-server": srv.proc.pid if srv.proc else 0}
        pids.update({f"writer{i}": p.pid for i, p in enumerate(w.procs)})
        run(f"NATS + 2 writers, steady {steady:,}/s then burst {10 * steady:,}/s", "bnats", send_nats,
            RssSampler(pids))
    finally:
        w.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--steady", type=int, default=20_000, help="steady samples/s of the burst test")
    ap.add_argument("--phase-s", type=float, default=4.0, help="seconds of steady load, then of burst")
    ap.add_argument("--burst-clients", type=int, default=16)
    ap.add_argument("--skip-burst", action="store_true")
    ap.add_argument("--database-url", default=None, help="a server to use (default: embedded PostgreSQL)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fabricscope-scale-"))
    db = TestDatabase.create(args.database_url, work / "pg")
    srv = NatsServer(work / "nats")
    srv.start()
    declare_streams(srv.url)
    svc = start_service(db.url, work)
    try:
        print(f"{args.rows:,} samples in batches of {args.batch:,} over {args.series:,} series; "
              f"{psutil.cpu_count()} CPUs; database, NATS, API and writers all on this machine", flush=True)
        throughput(args, db, srv, svc.url, work)
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE samples")  # settle the visibility map before sizing
            n, heap, total = conn.execute(
                "SELECT count(*), pg_relation_size('samples'), pg_total_relation_size('samples') FROM samples"
            ).fetchone()  # type: ignore[misc]
        print(f"  storage (plain PostgreSQL, uncompressed): {heap / n:.0f} bytes/row heap, "
              f"{total / n:.0f} bytes/row with indexes ({n:,} rows)", flush=True)
        if not args.skip_burst:
            burst(args, db, srv, svc.url, work, svc.proc.pid)
    finally:
        svc.stop()
        srv.stop()
        db.drop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
