"""A small real gloo job with the hook, for the hang tests: every step sleeps `--step-s` and
all-reduces once. `--block-rank R --block-step K`: rank R sleeps forever before step K's all-reduce
(it writes `--marker` with the wall time first). `--ckpt-step C --ckpt-s S`: rank 0 checkpoints for S
seconds after step C's all-reduce (through the hook's checkpoint context), then the job goes on."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--step-s", type=float, default=0.05)
    ap.add_argument("--block-rank", type=int, default=-1)
    ap.add_argument("--block-step", type=int, default=-1)
    ap.add_argument("--ckpt-step", type=int, default=-1)
    ap.add_argument("--ckpt-s", type=float, default=0.0)
    ap.add_argument("--marker", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from fabricscope.collectors.training import Recorder

    rec = Recorder().start()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(a.steps):
        with rec.step(step):
            time.sleep(a.step_s)
            if rank == a.block_rank and step == a.block_step:
                Path(a.marker).write_text(repr(time.time()))
                while True:
                    time.sleep(3600)  # the hung rank: never reaches the all-reduce
            dist.all_reduce(torch.ones(256))
            if rank == 0 and step == a.ckpt_step:
                with rec.checkpoint():
                    time.sleep(a.ckpt_s)
    dist.barrier()
    rec.close(timeout_s=10)
    Path(a.out).write_text("{}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
