"""A small real gloo job for bounded collective volume (tests/training/test_volume_e2e.py, the bench).

Each step: ``--per-step`` all-reduces of two sizes and one all_gather, then ``--compute-s`` of sleep.
``--slow-step K --slow-rank R``: rank R sleeps ``--sleep`` inside step K, so every rank's step K is slow
(the others wait in its all-reduce). ``--pause-after P --control-dir D``: every rank waits after step P
until ``D/go`` exists (the test asks for a step meanwhile). ``--no-hook``: the same job without it.
Writes ``--out``: collectives issued per step and the hook's stats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, for fabricscope.training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--per-step", type=int, default=6)
    ap.add_argument("--compute-s", type=float, default=0.01)
    ap.add_argument("--slow-step", type=int, default=-1)
    ap.add_argument("--slow-rank", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--pause-after", type=int, default=-1)
    ap.add_argument("--control-dir", default="")
    ap.add_argument("--no-hook", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rec = None
    if not a.no_hook:
        from fabricscope.training import Recorder

        rec = Recorder().start()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    issued: dict[int, int] = {}
    t0 = time.perf_counter()
    for step in range(a.steps):
        with rec.step(step) if rec is not None else _Nothing():
            if step == a.slow_step and rank == a.slow_rank:
                time.sleep(a.sleep)
            for i in range(a.per_step):
                dist.all_reduce(torch.ones(1000 if i % 2 else 64))  # two size buckets (4000 B, 256 B)
            out = [torch.zeros(8) for _ in range(dist.get_world_size())]
            dist.all_gather(out, torch.ones(8))
            issued[step] = a.per_step + 1
            time.sleep(a.compute_s)
        if step == a.pause_after and a.control_dir:
            go = Path(a.control_dir) / "go"
            while not go.exists():
                time.sleep(0.05)
    wall = time.perf_counter() - t0
    dist.barrier()
    stats: dict[str, int] = {}
    if rec is not None:
        rec.close(timeout_s=10)
        stats = rec.stats
    dist.destroy_process_group()
    Path(a.out).write_text(json.dumps({"rank": rank, "issued": issued, "stats": stats, "wall_s": wall,
                                       "pid": os.getpid()}))


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
