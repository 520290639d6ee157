"""Collective rows per second per rank, bounded detail against one row per collective (#45 item 3).

    .venv/bin/python bench/volume_rows.py [--world 4] [--steps 24] [--per-step 100] [--step-s 0.25]

A real gloo job: every rank runs the hook with ``FABRICSCOPE_COLLECTIVE_DETAIL=bounded`` against a
local receiver, and issues ``--per-step`` all-reduces a step (90 % of one gradient-bucket size, the rest
small, as DDP does), the step padded with sleep to ``--step-s``. Per rank it counts the rows it posted
(summaries + full records) and the rows ``all`` would have posted in the same run (one per collective
recorded). Rows/s are given as measured and at the issue's reference step of 2 s (rows per step / 2).
The sample is 1 in min(16, world): a job of 16 ranks or more samples 1 in 16, a smaller one more.
Also run by ``bench/hook_overhead.py --volume``.
"""

from __future__ import annotations

import argparse
import json
import os
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
REFERENCE_STEP_S = 2.0
TARGET_ROWS_S = 5.0


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from fabricscope.collectors.training import Recorder

    rec = Recorder(flush_interval_s=0.5).start()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    big, small = torch.ones(a.bucket_floats), torch.ones(16)
    t0 = time.perf_counter()
    for step in range(a.steps):
        s0 = time.perf_counter()
        with rec.step(step):
            for i in range(a.per_step):
                dist.all_reduce(small if i % 10 == 9 else big)
            time.sleep(max(0.0, a.step_s - (time.perf_counter() - s0)))
    wall = time.perf_counter() - t0
    rec.close(timeout_s=20)
    st = rec.stats
    Path(a.out).write_text(json.dumps({"rank": dist.get_rank(), "wall_s": wall, "steps": a.steps,
                                       "recorded": st["collectives_recorded"],
                                       "summaries": st["collective_summaries"], "detailed": st["collectives_detailed"],
                                       "slow": st["detail_steps_slow"], "sampled": st["detail_steps_sampled"],
                                       "dropped": st["dropped"], "errors": st["errors"]}))
    dist.destroy_process_group()


class _Receiver(BaseHTTPRequestHandler):
    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(b'{"accepted": 0}')

    do_PUT = do_POST

    def do_GET(self) -> None:  # noqa: N802 - the hook's poll for detail requests: none
        self._answer(b'{"job": "bench", "requests": []}')

    def log_message(self, *a: Any) -> None:
        pass


def run(a: argparse.Namespace) -> list[dict[str, Any]]:
    from bench.hook_overhead import free_port

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(a.world):
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(a.world), "LOCAL_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
                   "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "FABRICSCOPE_JOB": "bench-volume",
                   "FABRICSCOPE_URL": f"http://127.0.0.1:{server.server_address[1]}",
                   "FABRICSCOPE_SPOOL": str(Path(tmp) / "spool"), "FABRICSCOPE_COLLECTIVE_DETAIL": "bounded"}
            cmd = [sys.executable, __file__, "--worker", "--out", str(Path(tmp) / f"r{rank}.json"),
                   *[f"--{k.replace('_', '-')}={getattr(a, k)}"
                     for k in ("steps", "per_step", "step_s", "bucket_floats")]]
            procs.append(subprocess.Popen(cmd, env=env))
        for p in procs:
            if p.wait(600) != 0:
                raise SystemExit(f"a rank failed ({p.returncode})")
        out = [json.loads((Path(tmp) / f"r{r}.json").read_text()) for r in range(a.world)]
    server.shutdown()
    return out


def report(a: argparse.Namespace, results: list[dict[str, Any]]) -> float:
    med = statistics.median
    off = [r["recorded"] / r["wall_s"] for r in results]
    on = [(r["summaries"] + r["detailed"]) / r["wall_s"] for r in results]
    per_step_off = med(r["recorded"] / r["steps"] for r in results)
    per_step_on = med((r["summaries"] + r["detailed"]) / r["steps"] for r in results)
    ref = per_step_on / REFERENCE_STEP_S
    print(f"gloo on CPU, {a.world} ranks, {a.steps} steps of {a.step_s} s, {a.per_step} all_reduces a step "
          f"(sample 1 in {min(16, a.world)})")
    print(f"  rows/s per rank, measured: one per collective {med(off):7.1f}   bounded {med(on):6.1f}"
          f"   (max rank {max(on):.1f})")
    print(f"  rows per step per rank:    one per collective {per_step_off:7.1f}   bounded {per_step_on:6.2f}"
          f" (summaries {med(r['summaries'] / r['steps'] for r in results):.2f},"
          f" records {med(r['detailed'] / r['steps'] for r in results):.2f})")
    print(f"  at a {REFERENCE_STEP_S:g} s step: one per collective {per_step_off / REFERENCE_STEP_S:.1f} rows/s,"
          f" bounded {ref:.2f} rows/s per rank (target <= {TARGET_ROWS_S:g}:"
          f" {'met' if ref <= TARGET_ROWS_S else 'NOT met'}); steps sent in full as slow:"
          f" {sum(r['slow'] for r in results)}, as sampled: {sum(r['sampled'] for r in results)}"
          f" of {a.world * a.steps}; dropped {sum(r['dropped'] for r in results)}")
    return ref


def args_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--per-step", type=int, default=100)
    ap.add_argument("--step-s", type=float, default=0.25)
    ap.add_argument("--bucket-floats", type=int, default=4096, help="the big all-reduces' size (floats)")
    return ap


def main() -> None:
    a = args_parser().parse_args()
    if a.worker:
        worker(a)
        return
    report(a, run(a))


if __name__ == "__main__":
    main()
