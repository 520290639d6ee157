"""A training process that is sent SIGTERM (tests/training/test_final_dump.py).

--mode default: steps with collectives until killed; SIGTERM keeps its default action.
--mode handler: the program's own SIGTERM handler (set before the recorder starts) ends its loop.
--mode ignore: the program ignores SIGTERM; it stops by itself after --seconds.
--mode hang: a gloo job; rank 0 enters an all_reduce that rank 1 never joins.
The sender's flush interval is 60 s: whatever the receiver has came from the final dump or close().
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

from fabricscope.training import Recorder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    stop = {"now": False}
    if args.mode == "handler":
        def own(signum: int, frame: Any) -> None:
            stop["now"] = True
        signal.signal(signal.SIGTERM, own)
    elif args.mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.mode == "hang":
        hang()
        return
    if args.mode == "fork":
        fork()
        return
    rec = Recorder(flush_interval_s=60.0).start()
    deadline = time.monotonic() + args.seconds
    n = 0
    while not stop["now"] and time.monotonic() < deadline:
        with rec.step(n):
            t0 = time.time()
            time.sleep(0.01)
            rec.record_collective("all_reduce", t0, time.time(), bytes=4096, group="world")
        n += 1
        if n == 20:
            print("ready", flush=True)
    print(f"handled after {n} steps", flush=True)


def fork() -> None:
    """A forked worker (as a DataLoader's) is sent SIGTERM by its parent: it dies of it, alone."""
    rec = Recorder(flush_interval_s=60.0).start()
    with rec.step(0):
        pass
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(3)
    time.sleep(0.5)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    print(f"child signal {os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}", flush=True)
    time.sleep(1.0)  # the parent's dump would have run by now had the child's signal reached it
    print("parent alive", flush=True)


def hang() -> None:
    import torch
    import torch.distributed as dist

    rec = Recorder(flush_interval_s=60.0).start()
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for n in range(3):
        with rec.step(n):
            dist.all_reduce(t)
    if dist.get_rank() == 1:
        print("rank 1 stays out", flush=True)
        time.sleep(600)
    with rec.step(3):
        print("entering", flush=True)
        dist.all_reduce(t)  # never completes: rank 1 does not come
    print("left the all_reduce", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
