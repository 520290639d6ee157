"""Overhead of the training hook on a real gloo job, measured against itself in the same run.

    .venv/bin/python bench/hook_overhead.py [--world 2] [--rounds 6]

Two ranks (processes) train the same MLP; blocks of steps alternate between the plain job
(collective wrappers removed, no step records) and the hooked job (wrappers on, ``rec.step`` and
phases, records queued, gzipped and POSTed by the sender thread to a local receiver). Alternating
blocks cancel drift; medians resist the noise of a shared machine. Printed:

- per collective: a tight loop of 1-float all_reduces, hooked minus plain (µs, in situ), and the
  hook's bookkeeping alone (a wrapped no-op with all_reduce's signature, µs per call);
- step time: median hooked vs plain step (%), with the service up, and again with the service
  down (the hook retrying and spooling in the background).

Targets (issue 3): <= 20 µs per collective and <= 1 % of step time on CPU.

``--volume [--world N]``: instead, collective rows per second per rank with bounded detail against one
row per collective, on a real gloo job of 100 all-reduces a step (bench/volume_rows.py; #45 item 3,
target <= 5 rows/s per GPU at a 2 s step).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


# -- worker (one per rank) -------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from fabricscope.collectors.training import Recorder

    rec = Recorder(flush_interval_s=1.0).start()
    timer = rec._timer()
    assert timer is not None
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers: list[torch.nn.Module] = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)

    def hooked(on: bool) -> None:
        if on:
            timer.install()
        else:
            timer.uninstall()
            timer._stop.clear()

    def train_step(n: int, on: bool) -> float:
        t0 = time.perf_counter()
        ctx = rec.step(n) if on else None
        if ctx is not None:
            ctx.__enter__()
            rec.phase("forward_backward")
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if on:
            rec.phase("communication")
        for p in model.parameters():
            dist.all_reduce(p.grad)
        if on:
            rec.phase("optimizer")
        opt.step()
        opt.zero_grad()
        if ctx is not None:
            ctx.__exit__(None, None, None)
        return time.perf_counter() - t0

    def small_collectives(k: int) -> tuple[float, float]:
        """(wall, this thread's CPU) per 1-float all_reduce."""
        t = torch.ones(1)
        dist.barrier()
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(k):
            dist.all_reduce(t)
        return (time.perf_counter() - t0) / k, (time.thread_time() - c0) / k

    # Per round: the median step of each block and the per-op time of each collective loop.
    res: dict[str, list[float]] = {"base_step": [], "hook_step": [], "base_coll": [], "hook_coll": [],
                                   "base_all": [], "hook_all": [], "base_coll_cpu": [], "hook_coll_cpu": []}
    n = 0
    for _ in range(3):  # warm-up, both modes
        for on in (False, True):
            hooked(on)
            train_step(n, on)
            n += 1
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for on in order:
            hooked(on)
            key = "hook" if on else "base"
            times = [train_step(n + i, on) for i in range(args.steps)]
            res[f"{key}_step"].append(statistics.median(times))
            res[f"{key}_all"] += times
            n += args.steps
            wall, cpu = small_collectives(args.collectives)
            res[f"{key}_coll"].append(wall)
            res[f"{key}_coll_cpu"].append(cpu)

    # Per path (#45): 1-float all_reduces with no hook, the wrapper alone (the hook before #45), and the
    # Flight Recorder path (wrapper's clock only; records built by the reader thread, whose CPU is
    # added per collective). Alternating blocks, medians of this thread's CPU and wall per op.
    fr = timer.flight
    paths: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in ("none", "wrapper", "recorder")}
    reader_cpu, reader_ops = 0.0, 0

    def reader_clock() -> float:
        ident = fr._thread.ident if fr is not None and fr._thread is not None else None
        return time.clock_gettime(time.pthread_getcpuclockid(ident)) if ident is not None else 0.0

    for r in range(args.rounds):
        for path in ("none", "wrapper", "recorder") if r % 2 == 0 else ("recorder", "wrapper", "none"):
            if path == "recorder" and fr is None:
                continue
            hooked(path != "none")
            timer.flight = fr if path == "recorder" else None
            c0 = reader_clock()
            wall, cpu = small_collectives(args.collectives)
            if path == "recorder":
                p0 = time.thread_time()
                fr.poll()  # the reader's work left for these ops, done here and timed on this thread
                reader_cpu += time.thread_time() - p0 + reader_clock() - c0
                reader_ops += args.collectives
            paths[path]["wall"].append(wall)
            paths[path]["cpu"].append(cpu)
    timer.flight = fr
    hooked(True)

    # Bookkeeping alone: the wrapper around a no-op with all_reduce's signature.
    def noop(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    wrapped = timer._wrap("all_reduce", "all_reduce", noop, ("tensor",))
    t = torch.ones(1)
    calls = 20_000
    clock = time.thread_time  # this thread's CPU: what the hook costs, not what neighbours steal
    t0 = clock()
    for _ in range(calls):
        noop(t)
    plain = clock() - t0
    t0 = clock()
    for _ in range(calls):
        wrapped(t)
    book = (clock() - t0 - plain) / calls
    # The same on the wrapper-only path (no Flight Recorder): before #45 item 2 a dict and a sender
    # queue entry per call, now one tuple in the ring (the resolver thread makes the record).
    timer.flight, fr_kept = None, timer.flight
    t0 = clock()
    for _ in range(calls):
        wrapped(t)
    book_wrapper = (clock() - t0 - plain) / calls
    timer.flight = fr_kept

    # A step record with three phases, hook side only (no work inside).
    t0 = clock()
    for i in range(5000):
        with rec.step(10**6 + i):
            rec.phase("forward_backward")
            rec.phase("communication")
            rec.phase("optimizer")
    marks = (clock() - t0) / 5000

    dist.barrier()
    rec.flush(30)
    sender = rec._sender
    assert sender is not None and sender._thread.ident is not None
    # The sender thread's own CPU (json, gzip, HTTP or spool), per record it handled.
    sender_cpu = time.clock_gettime(time.pthread_getcpuclockid(sender._thread.ident))
    handled = max(1, sender.stats["sent"] + sender.stats["spooled"])
    rec.close(timeout_s=10)
    out: dict[str, Any] = {k: v for k, v in res.items()}
    out["bookkeeping_s"] = [book]
    out["bookkeeping_wrapper_s"] = [book_wrapper]
    out["marks_s"] = marks
    out["sender_cpu_per_record_s"] = sender_cpu / handled
    out["colls_per_step"] = 2 * args.depth
    out["stats"] = rec.stats
    out["paths"] = paths
    out["reader_cpu_per_op_s"] = reader_cpu / reader_ops if reader_ops else None
    Path(args.out).write_text(json.dumps(out))
    dist.destroy_process_group()


# -- driver ----------------------------------------------------------------------------------------
class _Sink(BaseHTTPRequestHandler):
    def _ok(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"accepted": 0}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = _ok

    def log_message(self, *a: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(args: argparse.Namespace, url: str, work: Path) -> list[dict[str, Any]]:
    port = free_port()
    procs = []
    for rank in range(args.world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(args.world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1", "FABRICSCOPE_URL": url, "FABRICSCOPE_JOB": "bench",
               "FABRICSCOPE_SPOOL": str(work / "spool"), "PYTHONPATH": str(REPO),
               "FABRICSCOPE_FLIGHT": "1"}  # the recorder path is opt-in; the bench measures it
        cmd = [sys.executable, __file__, "--worker", "--out", str(work / f"r{rank}.json"),
               *[f"--{k}={getattr(args, k)}" for k in ("rounds", "steps", "collectives", "width", "depth", "batch")]]
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        if p.wait(900) != 0:
            raise SystemExit(f"a rank failed ({p.returncode})")
    return [json.loads((work / f"r{r}.json").read_text()) for r in range(args.world)]


def report(label: str, results: list[dict[str, Any]]) -> tuple[float, float]:
    """Medians over rounds of the paired (adjacent blocks) differences, over all ranks."""
    med = statistics.median
    base_step = med(x for r in results for x in r["base_step"])
    hook_step = med(x for r in results for x in r["hook_step"])
    base_coll = med(x for r in results for x in r["base_coll"])
    hook_coll = med(x for r in results for x in r["hook_coll"])
    step_pct = med((h / b - 1) * 100 for r in results for b, h in zip(r["base_step"], r["hook_step"], strict=True))
    coll_us = med((h - b) * 1e6 for r in results for b, h in zip(r["base_coll"], r["hook_coll"], strict=True))
    coll_cpu_us = med((h - b) * 1e6 for r in results
                      for b, h in zip(r["base_coll_cpu"], r["hook_coll_cpu"], strict=True))
    book = med(r["bookkeeping_s"][0] for r in results)

    def p10(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=10)[0]

    base_p10 = med(p10(r["base_all"]) for r in results)
    hook_p10 = med(p10(r["hook_all"]) for r in results)
    print(f"[{label}]")
    print(f"  step time      plain {base_step * 1e3:8.3f} ms   hooked {hook_step * 1e3:8.3f} ms   "
          f"overhead {step_pct:+.2f} % (median of paired blocks)")
    print(f"  step time p10  plain {base_p10 * 1e3:8.3f} ms   hooked {hook_p10 * 1e3:8.3f} ms   "
          f"overhead {(hook_p10 / base_p10 - 1) * 100:+.2f} % (fastest decile: least disturbed)")
    print(f"  all_reduce(1)  plain {base_coll * 1e6:8.1f} µs   hooked {hook_coll * 1e6:8.1f} µs   "
          f"overhead {coll_us:+.1f} µs in situ (wall), {coll_cpu_us:+.1f} µs CPU of the calling thread")
    print(f"  hook bookkeeping alone: {book * 1e6:.2f} µs CPU per collective (wrapped no-op, thread time)")
    book_w = med(r["bookkeeping_wrapper_s"][0] for r in results)
    print(f"  hook bookkeeping alone, wrapper-only path: {book_w * 1e6:.2f} µs CPU per collective (wrapped no-op)")
    marks = med(r["marks_s"] for r in results)
    per_rec = med(r["sender_cpu_per_record_s"] for r in results)
    n_coll = results[0]["colls_per_step"]
    per_coll = max(book, coll_cpu_us / 1e6)  # the in-situ CPU delta is the honest one when larger
    accounted = marks + n_coll * per_coll + (1 + n_coll) * per_rec
    print(f"  hook CPU per step: step+phase marks {marks * 1e6:.1f} µs, {n_coll} collectives x {per_coll * 1e6:.2f} µs,"
          f" sender thread {per_rec * 1e6:.2f} µs/record x {1 + n_coll}"
          f" = {accounted * 1e6:.1f} µs = {accounted / base_step * 100:.2f} % of the plain step")
    if results[0].get("paths"):
        base_cpu = med(x for r in results for x in r["paths"]["none"]["cpu"])
        base_wall = med(x for r in results for x in r["paths"]["none"]["wall"])
        print("  per path, all_reduce(1) (median over blocks and ranks; ratio to no hook in this run):")
        for path in ("none", "wrapper", "recorder"):
            walls = [x for r in results for x in r["paths"][path]["wall"]]
            cpus = [x for r in results for x in r["paths"][path]["cpu"]]
            if not walls:
                print(f"    {path:9s} not available (torch without the Flight Recorder)")
                continue
            extra = med(r["reader_cpu_per_op_s"] for r in results) if path == "recorder" else 0.0
            print(f"    {path:9s} wall {med(walls) * 1e6:7.1f} µs (x{med(walls) / base_wall:.3f})   "
                  f"CPU {med(cpus) * 1e6:7.1f} µs (x{med(cpus) / base_cpu:.3f}, {(med(cpus) - base_cpu) * 1e6:+.1f} µs)"
                  + (f" + reader thread {extra * 1e6:.2f} µs/op" if path == "recorder" else ""))
    st = results[0]["stats"]
    print(f"  rank 0 sender: sent {st.get('sent')}, spooled {st.get('spooled')}, dropped {st.get('dropped')}")
    return accounted / base_step * 100, max(book, coll_cpu_us / 1e6) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10, help="alternating plain/hooked blocks per mode")
    ap.add_argument("--steps", type=int, default=9, help="training steps per block")
    ap.add_argument("--collectives", type=int, default=300, help="small all_reduces per block")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--volume", action="store_true", help="rows/s per rank, bounded detail on vs off (#45)")
    args = ap.parse_args()
    if args.volume:
        from bench import volume_rows

        va = volume_rows.args_parser().parse_args([f"--world={args.world}"])
        volume_rows.report(va, volume_rows.run(va))
        return
    if args.worker:
        worker(args)
        return
    import torch

    print(f"gloo on CPU, {args.world} ranks, torch {torch.__version__}, MLP {args.depth}x{args.width}, "
          f"batch {args.batch}, {args.depth * 2} all_reduces per step, {args.rounds} alternating rounds")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        up_pct, book = report("service up", run(args, f"http://127.0.0.1:{server.server_address[1]}", Path(tmp)))
        server.shutdown()
        down_pct, _ = report("service down (retrying, spooling)",
                             run(args, f"http://127.0.0.1:{free_port()}", Path(tmp) / "down"))
    ok = book <= 20 and up_pct <= 1.0  # book: the larger of bookkeeping alone and in-situ CPU
    print(f"targets: <= 20 µs CPU per collective, <= 1 % step time (hook CPU accounted): {'met' if ok else 'NOT met'}"
          f" (service down: {down_pct:.2f} %). Wall-clock deltas above are within this machine's noise"
          " when they disagree in sign between rounds.")


if __name__ == "__main__":
    main()
