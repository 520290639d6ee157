"""A small real data-parallel training job (torch.distributed, gloo, CPU) instrumented with the hook.

Run one process per rank with torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT) and FABRICSCOPE_* for the hook. It writes ``--out``: what it actually
did (every collective it issued, in order, with its bytes; its step times; the hook's stats), so
tests can compare what landed in the database with the truth.

Modes: ``explicit`` all-reduces gradients itself and every few steps also runs broadcast,
all_gather, all_gather_into_tensor, all_to_all_single, an async all_reduce, isend/irecv and a
barrier; ``ddp`` wraps the model in DistributedDataParallel with the hook's comm hook.
``--no-hook`` runs the identical job without fabricscope (the bench's baseline). ``--throttle-from K
--throttle-s S`` makes rank 0 sleep S inside every all-reduce from step K on (a slow fabric).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, for fabricscope.training


def wait_for(path: Path, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--mode", choices=["explicit", "ddp"], default="explicit")
    ap.add_argument("--no-hook", action="store_true")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-step", type=int, default=-1)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--extra-every", type=int, default=5)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--checkpoint-dir", default="")
    ap.add_argument("--control-dir", default="", help="rank 0 waits for the test here")
    ap.add_argument("--pause-at", default="")
    ap.add_argument("--throttle-from", type=int, default=-1, help="from this step rank 0's all-reduces are slow")
    ap.add_argument("--throttle-s", type=float, default=0.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    current = {"step": -1}
    if a.throttle_from >= 0 and os.environ.get("RANK") == "0":
        # A sleep inside the collective path: wrapped before the hook installs, so the hook times it as
        # part of rank 0's all-reduce, and the other ranks wait for it inside theirs: a slow fabric.
        inner = dist.all_reduce

        @functools.wraps(inner)
        def throttled(*args: Any, **kwargs: Any) -> Any:
            if current["step"] >= a.throttle_from:
                time.sleep(a.throttle_s)
            return inner(*args, **kwargs)

        dist.all_reduce = throttled  # type: ignore[assignment]

    rec: Any = None
    if not a.no_hook:
        from fabricscope.collectors.training import Recorder

        rec = Recorder().start()  # line 1 of the instrumentation; FABRICSCOPE_* from the env
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(32, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, 8))
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        if rec is not None:
            model.register_comm_hook(None, rec.ddp_comm_hook())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    issued: list[dict[str, Any]] = []
    step_times: list[float] = []
    pauses = {int(x) for x in a.pause_at.split(",") if x}
    ctl = Path(a.control_dir) if a.control_dir else None

    def note(step: int, op: str, nbytes: int) -> None:
        issued.append({"step": step, "op": op, "bytes": nbytes})

    def phase(name: str) -> None:
        if rec is not None:
            rec.phase(name)

    def train_step(step: int) -> None:
        phase("data")
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        phase("forward_backward")
        loss = torch.nn.functional.mse_loss(model(x), y)
        if rank == a.slow_rank and step == a.slow_step:
            time.sleep(a.sleep)  # the straggler: its compute is slow, the others wait for it
        loss.backward()
        if a.mode == "ddp":
            # DDP buckets every gradient into one all-reduce for a model this small.
            note(step, "all_reduce", sum(p.numel() * p.element_size() for p in model.parameters()))
        phase("communication")
        if a.mode == "explicit":
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= world
                note(step, "all_reduce", p.grad.numel() * 4)
            if a.extra_every and step % a.extra_every == 0:
                extras(step)
        phase("optimizer")
        opt.step()
        opt.zero_grad()
        if a.checkpoint_dir and step == a.steps - 1 and rank == 0:
            path = Path(a.checkpoint_dir) / f"step{step}.pt"
            with rec.checkpoint(path) if rec is not None else contextlib.nullcontext():
                torch.save(model.state_dict(), path)

    def extras(step: int) -> None:
        t = torch.full((10,), float(rank))
        dist.broadcast(t, src=0)
        note(step, "broadcast", 40)
        outs = [torch.zeros(3) for _ in range(world)]
        dist.all_gather(outs, torch.full((3,), float(rank)))
        note(step, "all_gather", 12)
        out = torch.zeros(world * 4)
        dist.all_gather_into_tensor(out, torch.ones(4))
        note(step, "all_gather_into_tensor", 16)
        a2a_in = torch.arange(world * 2, dtype=torch.float64)
        dist.all_to_all_single(torch.empty_like(a2a_in), a2a_in)
        note(step, "all_to_all_single", world * 2 * 8)
        w = dist.all_reduce(torch.ones(100), async_op=True)
        w.wait()
        note(step, "all_reduce", 400)
        if world >= 2 and rank in (0, 1):
            buf = torch.zeros(5, dtype=torch.int32)
            req = dist.isend(buf, 1) if rank == 0 else dist.irecv(buf, 0)
            assert req is not None
            req.wait()
            note(step, "send" if rank == 0 else "recv", 20)
        dist.barrier()
        note(step, "barrier", 0)

    for step in range(a.steps):
        if ctl is not None and step in pauses and rank == 0:
            (ctl / f"at-{step}").touch()  # the test changes the world (stops the service) ...
            wait_for(ctl / f"go-{step}")  # ... and lets training go on
        current["step"] = step
        t0 = time.perf_counter()
        with rec.step(step) if rec is not None else contextlib.nullcontext():
            train_step(step)
        step_times.append(time.perf_counter() - t0)

    dist.barrier()
    stats: dict[str, int] = {}
    if rec is not None:
        rec.close(timeout_s=10)
        stats = rec.stats
    Path(a.out).write_text(json.dumps({"rank": rank, "world": world, "issued": issued,
                                       "step_times": step_times, "stats": stats, "pid": os.getpid()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
