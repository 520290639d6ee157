"""A bounded soak of `fabricscope serve` on its embedded PostgreSQL, with a database restart midway.

    python bench/soak.py [--duration 600] [--clients 8] [--readers 20] [--idle 50] [--json OUT]
    python bench/soak.py --hostile [--compare] ...   # #46: the hostile clients beside the same load

Load: ``--clients`` ingest clients (the real HttpSender with a spool: samples, steps, an event now and
then), ``--readers`` dashboard-like readers over the read endpoints, ``--idle`` sockets that say
nothing or drip request headers and never finish. Halfway, the database is stopped for ``--outage``
seconds and started again. Baseline, measured first in the same run: one client posting alone.

Pass/fail: no 5xx outside the restart window (its start to ``--grace`` s after the database is
back); nothing lost (per client: samples counted and their values summed, steps and events counted,
in the database against what was submitted); p99 ingest latency outside the window under ``--p99-ms``;
the service process's RSS ceiling under ``--rss-mb``. Exit status 0 only when all four pass.

``--hostile`` adds bench/soak_hostile.py's clients, each from loopback addresses of its own: an idle
flood (``--idle-flood`` sockets), slow readers and wide series reads (over ``--wide-series`` series) and
scope-less big bodies. ``--compare`` first runs the same soak without them, then with them, and
checks the legitimate ingest p99 with them within ``--p99-ratio`` times the p99 without.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak_hostile import (  # noqa: E402
    WIDE_METRIC,
    IdleFlood,
    ScopelessBodies,
    SlowReaders,
    WideReads,
    busy_counts,
    seed_wide_source,
)
from bench.soak_load import (  # noqa: E402
    IdleSockets,
    IngestClient,
    Log,
    Reader,
    RssSampler,
    TimedTransport,
    cpu_seconds,
)
from fabricscope.collectors.sinks.http import HttpTransport  # noqa: E402
from fabricscope.core.transport import Batch  # noqa: E402
from fabricscope.service.db.embedded import EmbeddedPostgres  # noqa: E402
from tests.support import REPO, free_port  # noqa: E402

MB = 1 << 20


def start_serve(work: Path, port: int, pg_port: int, tokens: str) -> subprocess.Popen[bytes]:
    """`fabricscope serve` with no DATABASE_URL: it starts (and at exit stops) its embedded PostgreSQL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_") and k != "DATABASE_URL"}
    env.update(FABRICSCOPE_DATA_DIR=str(work / "data"), FABRICSCOPE_EMBEDDED_PORT=str(pg_port),
               FABRICSCOPE_TOKENS=tokens)
    with (work / "service.log").open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fabricscope", "serve", "--host", "127.0.0.1",
                                 "--port", str(port)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"service exited with {proc.returncode}: see {work / 'service.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2, trust_env=False).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.terminate()
    raise SystemExit("service not ready in 180 s")


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def idle_baseline(url: str, token: str, n: int = 200) -> dict[str, float]:
    """One client alone, posting batches of the size the load's clients send (50 samples, 2-3 ticks)."""
    log = Log()
    t = TimedTransport(HttpTransport(url, token=token, timeout_s=10), log)
    now = time.time()
    for k in range(n):
        items = [{"ts": now + k, "source": f"baseline{s}:eth0", "metric": "rx_bytes_total", "value": float(k)}
                 for s in range(125)]
        body = {"batch_id": uuid.uuid4().hex, "samples": items}
        t.send(Batch("samples", None, body["batch_id"], body, json.dumps(body)))
    lat = [(r[1] - r[0]) * 1000 for r in log.rows[5:]]  # the first few create the series
    return {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}


def summarize(log: Log, window: tuple[float, float]) -> dict[str, Any]:
    w0, w1 = window
    inside = [r for r in log.rows if r[1] >= w0 and r[0] <= w1]
    outside = [r for r in log.rows if not (r[1] >= w0 and r[0] <= w1)]
    lat = [(r[1] - r[0]) * 1000 for r in outside]

    def by_status(rows: list[tuple[float, float, int | None, str]]) -> dict[str, int]:
        return dict(sorted(Counter("no answer" if r[2] is None else str(r[2]) for r in rows).items()))

    per: dict[str, list[float]] = {}
    for r in outside:
        per.setdefault(r[3], []).append((r[1] - r[0]) * 1000)
    return {"requests": len(log.rows), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "max_ms": max(lat, default=0),
            "outside_window": by_status(outside), "inside_window": by_status(inside),
            "5xx_outside_window": sum(1 for r in outside if r[2] is not None and r[2] >= 500),
            "5xx_outside_by_endpoint": dict(Counter(r[3] for r in outside if r[2] is not None and r[2] >= 500)),
            "no_answer_outside_window": sum(1 for r in outside if r[2] is None),
            "p99_ms_by_endpoint": {k: round(pct(v, 0.99), 1) for k, v in sorted(per.items())}}


def tenths(samples: list[tuple[float, int]], t0: float, duration: float) -> list[float]:
    """The RSS ceiling in each tenth of the run (MB): a leak climbs, a warm-up levels off."""
    out = [0.0] * 10
    for t, b in samples:
        k = min(9, max(0, int((t - t0) / duration * 10)))
        out[k] = max(out[k], round(b / MB, 1))
    return out


def checksums(dsn: str, clients: list[IngestClient]) -> list[dict[str, Any]]:
    out = []
    with psycopg.connect(dsn) as conn:
        for c in clients:
            n, vsum = conn.execute(
                "SELECT count(*), coalesce(sum(s.value), 0) FROM samples s JOIN series se ON se.id = s.series_id "
                "JOIN sources src ON src.id = se.source_id WHERE src.device LIKE %s", (f"{c.prefix}h%",)).fetchone()
            steps, step_sum = conn.execute("SELECT count(*), coalesce(sum(step), 0) FROM steps WHERE job = %s",
                                           (c.job,)).fetchone()
            (events,) = conn.execute("SELECT count(*) FROM events WHERE job = %s", (c.job,)).fetchone()
            want = c.submitted()
            got = {"samples": n, "value_sum": vsum, "steps": steps, "step_sum": int(step_sum), "events": events}
            want_sums = {"samples": want["samples"], "value_sum": want["value_sum"], "steps": want["steps"],
                         "step_sum": want["steps"] * (want["steps"] - 1) // 2, "events": want["events"]}
            out.append({"client": c.i, "submitted": want_sums, "stored": got, "sender": c.sender.stats,
                        "equal": got == want_sums})
    return out


def lost(sums: list[dict[str, Any]]) -> dict[str, int]:
    """What was submitted and is not in the database, summed over the clients (negative: stored twice)."""
    return {k: sum(c["submitted"][k] - c["stored"][k] for c in sums) for k in ("samples", "steps", "events")}


def hostile_load(args: argparse.Namespace, url: str, port: int, ingest_tok: str, read_tok: str,
                 stop: threading.Event) -> list[threading.Thread]:
    """#46's hostile clients, the wide source seeded first (outside the measured time)."""
    wide = "soak-wide:e0"
    t = time.monotonic()
    seed_wide_source(url, ingest_tok, wide, series=args.wide_series, points=args.wide_points)
    print(f"  seeded {args.wide_series} series x {args.wide_points} points for the wide reads in "
          f"{time.monotonic() - t:.0f} s", flush=True)
    path = f"/v1/sources/{wide}/metrics/{WIDE_METRIC}"
    return [IdleFlood(port, args.idle_flood, stop), SlowReaders(port, path, read_tok, args.slow_readers, stop),
            WideReads(url, path, read_tok, args.wide_readers, stop), ScopelessBodies(port, read_tok, 4, stop)]


def hostile_summary(threads: list[threading.Thread], url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for th in threads:
        if isinstance(th, IdleFlood):
            out["idle_flood"] = {"opened": th.opened, "closed_by_server": th.closed_by_server,
                                 "open_failures": th.open_failures}
        elif isinstance(th, SlowReaders):
            out["slow_readers"] = {"asked": th.asked, "closed_by_server": th.closed_by_server}
        elif isinstance(th, WideReads):
            out["wide_reads"] = dict(th.statuses)
        elif isinstance(th, ScopelessBodies):
            out["scopeless_bodies"] = dict(th.statuses)
    out["busy_rejected"] = busy_counts(url)
    return out


def run(args: argparse.Namespace, work: Path, *, hostile: bool = False) -> dict[str, Any]:
    port, pg_port = free_port(), free_port()
    ingest_tok, read_tok = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    proc = start_serve(work, port, pg_port, f"{ingest_tok}:ingest;{read_tok}:read")
    emb = EmbeddedPostgres(work / "data", pg_port)
    url = f"http://127.0.0.1:{port}"
    bad: list[threading.Thread] = []
    try:
        base = idle_baseline(url, ingest_tok)
        print(f"  idle baseline (1 client alone): ingest p50 {base['p50_ms']:.1f} ms, p99 {base['p99_ms']:.1f} ms",
              flush=True)
        stop, stop_rss = threading.Event(), threading.Event()
        rss = RssSampler(proc.pid, stop_rss)
        rss.start()
        ingest_log, read_log = Log(), Log()
        run_id = "s" + uuid.uuid4().hex[:6]
        clients = [IngestClient(i, run_id, url, ingest_tok, work / f"spool-{i}", ingest_log, stop)
                   for i in range(args.clients)]
        readers = [Reader(i, url, read_tok, clients, read_log, stop, interval=args.read_interval,
                          report=args.report_reads)
                   for i in range(args.readers)]
        idle = IdleSockets(port, args.idle, stop)
        if hostile:
            bad = hostile_load(args, url, port, ingest_tok, read_tok, stop)
        t0 = time.monotonic()
        # CPU seconds of the service and of this process (the legitimate clients, and the hostile ones when
        # --hostile: they share the machine's cores with the service), over the measured time.
        cpu0 = (cpu_seconds(proc.pid), cpu_seconds(os.getpid()))
        for th in [*clients, *readers, idle, *bad]:
            th.start()
        time.sleep(max(0.0, t0 + args.duration / 2 - time.monotonic()))
        print(f"  {time.monotonic() - t0:.0f} s: stopping the database for {args.outage:.0f} s", flush=True)
        w0 = time.monotonic()
        emb.stop()
        time.sleep(args.outage)
        emb.start()
        up = time.monotonic()
        print(f"  {up - t0:.0f} s: database back (down {up - w0:.1f} s)", flush=True)
        time.sleep(max(0.0, t0 + args.duration - time.monotonic()))
        cpu = {"service_s": round(cpu_seconds(proc.pid) - cpu0[0], 1),
               "soak_clients_s": round(cpu_seconds(os.getpid()) - cpu0[1], 1),
               "load_average": [round(x, 2) for x in os.getloadavg()]}
        stop.set()
        for th in [*clients, *readers, idle, *bad]:
            th.join(60)
        hostile_figures = hostile_summary(bad, url) if hostile else None
        flushed = [c.sender.flush(timeout_s=120) for c in clients]
        if not all(flushed):  # what holds the database, for the report
            with psycopg.connect(emb.dsn(), autocommit=True) as conn:
                for row in conn.execute("SELECT state, wait_event_type, wait_event, now() - query_start,"
                                        " left(query, 100) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                                        " AND backend_type = 'client backend'").fetchall():
                    print(f"  held: {row}", flush=True)
        for c in clients:
            c.sender.close(timeout_s=30)
        stop_rss.set()
        rss.join(5)
        sums = checksums(emb.dsn(), clients)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        emb.stop()
    window = (w0, up + args.grace)
    ceiling = max((b for _, b in rss.samples), default=0)
    first = [b for t, b in rss.samples if t < t0 + min(30.0, args.duration / 10)]
    return {"duration_s": args.duration, "clients": args.clients, "readers": args.readers, "idle": args.idle,
            "outage_s": round(up - w0, 2), "window_s": [round(w0 - t0, 2), round(window[1] - t0, 2)],
            "baseline": base, "ingest": summarize(ingest_log, window), "read": summarize(read_log, window),
            "rss_mb": {"start": round(max(first, default=0) / MB, 1), "ceiling": round(ceiling / MB, 1),
                       "end": round(rss.samples[-1][1] / MB, 1) if rss.samples else 0,
                       "by_tenth": tenths(rss.samples, t0, args.duration)},
            "checksums": sums, "flushed": all(flushed), "lost": lost(sums), "cpu": cpu,
            "idle_closed_by_server": idle.closed_by_server, "idle_open_failures": idle.open_failures,
            "hostile": hostile_figures}


def verdict(r: dict[str, Any], args: argparse.Namespace) -> dict[str, bool]:
    return {"no_5xx_outside_restart": r["ingest"]["5xx_outside_window"] + r["read"]["5xx_outside_window"] == 0,
            "nothing_lost": r["flushed"] and all(c["equal"] and c["sender"]["dropped"] == 0 for c in r["checksums"]),
            "p99_ingest": r["ingest"]["p99_ms"] <= args.p99_ms,
            "rss_ceiling": r["rss_mb"]["ceiling"] <= args.rss_mb}


def report(r: dict[str, Any], checks: dict[str, bool], args: argparse.Namespace) -> None:
    ok = {True: "PASS", False: "FAIL"}
    for name in ("ingest", "read"):
        s = r[name]
        print(f"  {name:<7} {s['requests']:>7,} requests  p50 {s['p50_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms "
              f"({s['p99_ms'] / max(r['baseline']['p99_ms'], 0.001):.2f}x idle p99)  max {s['max_ms']:7.1f} ms")
        print(f"          outside the restart window {s['outside_window']}; inside {s['inside_window']}")
        print(f"          p99 by endpoint (ms) {s['p99_ms_by_endpoint']}")
    n = sum(c["stored"]["samples"] for c in r["checksums"])
    print(f"  stored {n:,} samples, {sum(c['stored']['steps'] for c in r['checksums']):,} steps, "
          f"{sum(c['stored']['events'] for c in r['checksums']):,} events; spooled by the senders "
          f"{sum(c['sender']['spooled'] for c in r['checksums']):,}, retries "
          f"{sum(c['sender']['retries'] for c in r['checksums']):,}")
    legit = r["ingest"]["requests"] + r["read"]["requests"]
    print(f"  lost: {r['lost']['samples']} samples, {r['lost']['steps']} steps, {r['lost']['events']} events; "
          f"dropped by the senders {sum(c['sender']['dropped'] for c in r['checksums'])}")
    print(f"  CPU over the measured time: service {r['cpu']['service_s']} s "
          f"({1000 * r['cpu']['service_s'] / max(legit, 1):.1f} ms per legitimate request), this process's "
          f"clients {r['cpu']['soak_clients_s']} s; load average at the end {r['cpu']['load_average']}")
    print(f"  RSS of the service: {r['rss_mb']['start']} MB at start, ceiling {r['rss_mb']['ceiling']} MB, "
          f"end {r['rss_mb']['end']} MB; by tenth of the run {r['rss_mb']['by_tenth']}")
    print(f"  idle/slow sockets closed by the server: {r['idle_closed_by_server']}")
    if r.get("hostile"):
        print(f"  hostile clients: {json.dumps(r['hostile'])}")
    print(f"  {ok[checks['no_5xx_outside_restart']]}  no 5xx outside the restart window "
          f"(ingest {r['ingest']['5xx_outside_window']}, read {r['read']['5xx_outside_window']})")
    print(f"  {ok[checks['nothing_lost']]}  nothing lost (counts and sums per client, database vs submitted)")
    print(f"  {ok[checks['p99_ingest']]}  p99 ingest {r['ingest']['p99_ms']:.1f} ms <= {args.p99_ms:.0f} ms")
    print(f"  {ok[checks['rss_ceiling']]}  RSS ceiling {r['rss_mb']['ceiling']} MB <= {args.rss_mb:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--readers", type=int, default=20)
    ap.add_argument("--idle", type=int, default=50)
    ap.add_argument("--read-interval", type=float, default=0.5, help="seconds between one reader's requests")
    ap.add_argument("--report-reads", action=argparse.BooleanOptionalAction, default=True,
                    help="readers also GET /v1/jobs/{job}/report (the costliest read: attribution of every step)")
    ap.add_argument("--outage", type=float, default=3.0, help="seconds the database stays down")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds after the restart still in its window")
    ap.add_argument("--p99-ms", type=float, default=1000.0)
    ap.add_argument("--rss-mb", type=float, default=500.0)
    ap.add_argument("--json", type=Path, default=None, help="write the figures and checks here")
    ap.add_argument("--hostile", action="store_true", help="add #46's hostile clients (bench/soak_hostile.py)")
    ap.add_argument("--compare", action="store_true", help="with --hostile: the soak without them first, then "
                    "with them; their legitimate ingest p99s compared")
    ap.add_argument("--p99-ratio", type=float, default=2.0)
    ap.add_argument("--idle-flood", type=int, default=520)
    ap.add_argument("--slow-readers", type=int, default=4)
    ap.add_argument("--wide-readers", type=int, default=4)
    ap.add_argument("--wide-series", type=int, default=5000)
    ap.add_argument("--wide-points", type=int, default=20)
    args = ap.parse_args()

    # SIGTERM (a test's timeout) unwinds like Ctrl-C: the finally blocks stop the service and the database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = [False, True] if args.hostile and args.compare else [args.hostile]
    results: dict[str, Any] = {}
    for hostile in runs:
        name = "hostile" if hostile else "plain"
        work = Path(tempfile.mkdtemp(prefix="fabricscope-soak-"))
        print(f"soak ({name}): {args.duration:.0f} s, {args.clients} ingest clients, {args.readers} readers, "
              f"{args.idle} idle/slow sockets, `fabricscope serve` on its embedded PostgreSQL (restarted halfway)"
              + (f"; hostile: {args.idle_flood} idle flood, {args.slow_readers} slow readers, {args.wide_readers} "
                 f"wide readers ({args.wide_series} series), 4 scope-less big bodies" if hostile else ""), flush=True)
        try:
            r = run(args, work, hostile=hostile)
            checks = verdict(r, args)
            if not all(checks.values()):  # what the service said, before its folder goes
                lines = (work / "service.log").read_text(errors="replace").splitlines()
                print("  service.log (last 30 lines):\n    " + "\n    ".join(lines[-30:]), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        report(r, checks, args)
        r["checks"] = checks
        r["limits"] = {"p99_ms": args.p99_ms, "rss_mb": args.rss_mb}
        results[name] = r
    if len(runs) == 2:
        ratio = results["hostile"]["ingest"]["p99_ms"] / max(results["plain"]["ingest"]["p99_ms"], 0.001)
        results["hostile"]["checks"]["p99_ratio"] = ratio <= args.p99_ratio
        results["p99_ratio"] = round(ratio, 2)
        print(f"  {'PASS' if ratio <= args.p99_ratio else 'FAIL'}  legitimate ingest p99 with the hostile clients "
              f"{results['hostile']['ingest']['p99_ms']:.1f} ms = {ratio:.2f}x the soak without them "
              f"({results['plain']['ingest']['p99_ms']:.1f} ms), limit {args.p99_ratio:g}x")
    ok = all(all(r["checks"].values()) for k, r in results.items() if k != "p99_ratio")
    if args.json:
        args.json.write_text(json.dumps(results if len(runs) == 2 else results[name], indent=2))
    print(f"result: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
