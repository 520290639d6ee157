"""µs per collective for each way the training hook times collectives, on one CUDA GPU (issue #45).

    PYTHONPATH=. python3 tools/device/hook_paths.py OUTDIR        # under a minute; needs torch with CUDA

A one-rank NCCL job all-reduces a 4 KiB tensor in alternating blocks of 2,000 ops, 5 rounds, with:

- ``none``: no hook;
- ``unpooled``: the wrapper creating two new CUDA events per op and dropping them once resolved (the
  event cost of the hook before pooling; the ops still go through the tuple ring);
- ``pooled``: the wrapper as shipped: event pairs from the device's pool, one tuple per op, resolved
  per stream in issue order;
- ``recorder``: the Flight Recorder path (nothing on the training thread; NCCL's own timing, enabled
  by the hook with ``TORCH_NCCL_ENABLE_TIMING=1`` before the process group exists).

Each block ends with a device sync, so wall time per op includes the GPU work; ``cpu_us_per_op`` is the
training thread's CPU time per op (the hook's bookkeeping shows there first). Printed and written to
OUTDIR/hook_paths.json: µs per op per path and the ratio to no hook in the same run. Self-checks
(exit 1 when one fails): every hooked path's records arrive at a local receiver (one per op; the
Flight Recorder's reader runs in the recorder's blocks only, with a ring of 4,096 entries, so that it
does not wrap between two reads: ``stats.flight_missed`` says if it did), with seq and a positive
duration, and no hook posts nothing; the pooled path makes no event after its first block and leaves no op
untimed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from receiver import start_receiver  # tools/device/receiver.py, beside this script

from fabricscope.collectors.training.cudatiming import EventPool


class Unpooled(EventPool):
    """Two new events per op, dropped once resolved: what the hook paid before pooling."""

    def take(self, dev: int | None) -> tuple[object, object]:
        self.made[dev] = self.made.get(dev, 0) + 1
        return (self._make(), self._make())

    def give(self, dev: int | None, pair: tuple[object, object]) -> None:
        pass

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
OPS, ROUNDS = 2000, 5


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    url, received = start_receiver()
    got = received.setdefault("collectives", [])
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29591",
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        FABRICSCOPE_URL=url,
        FABRICSCOPE_JOB="paths",
        FABRICSCOPE_SPOOL=str(OUT / "spool"),
        FABRICSCOPE_FLIGHT_INTERVAL_S="0.2",
        FABRICSCOPE_FLIGHT="1",
        # a 4 KiB op takes ~20-50 µs: the hook's default ring (512) would wrap between two reads
        TORCH_FR_BUFFER_SIZE=os.environ.get("TORCH_FR_BUFFER_SIZE", "4096"),
    )
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing measured")
        return 1
    from fabricscope.training import Recorder

    torch.cuda.set_device(0)
    rec = Recorder(flush_interval_s=0.5).start()  # sets TORCH_NCCL_ENABLE_TIMING / TORCH_FR_BUFFER_SIZE
    dist.init_process_group("nccl")
    timer = rec._timer()
    assert timer is not None
    fr = timer.flight
    pooled = timer.cuda.pool
    unpooled = Unpooled(pooled._make)
    x = torch.ones(1024, device="cuda")  # 4 KiB
    for _ in range(50):
        dist.all_reduce(x)
    torch.cuda.synchronize()

    def block(path: str) -> float:
        if path == "none":
            timer.uninstall()
            timer._stop.clear()
        else:
            timer.install()
        timer.flight = fr if path == "recorder" else None
        rec.flush(30)
        if fr is not None:  # the reader lists the ring in the recorder's blocks only, from their first op
            fr.disabled = path != "recorder"
            doc = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=True))
            fr.last_id = max((e["record_id"] for e in doc.get("entries") or []), default=fr.last_id)
            fr._held.clear()
        timer.cuda.pool = unpooled if path == "unpooled" else pooled
        before = len(got)
        made = pooled.events_created
        torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.thread_time()
        with rec.step(len(per)):
            for _ in range(OPS):
                dist.all_reduce(x)
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / OPS
        cpu[path].append((time.thread_time() - c0) / OPS)
        if path == "pooled":  # pairs made in this block: once the pool holds enough in flight, none
            new_pairs.append((pooled.events_created - made) // 2)
        rec.flush(30)
        if fr is not None:
            fr.poll()
        rec.flush(30)
        counts[path].append(len(got) - before)
        return dt

    paths = ["none", "unpooled", "pooled"] + (["recorder"] if fr is not None else [])
    res: dict[str, list[float]] = {p: [] for p in paths}
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    new_pairs: list[int] = []
    counts: dict[str, list[int]] = {p: [] for p in paths}
    per: list[int] = []
    for r in range(ROUNDS):
        for p in paths if r % 2 == 0 else paths[::-1]:
            res[p].append(block(p))
            per.append(1)
    rec.close(10)
    base = statistics.median(res["none"])
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    out = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "nccl": nccl,
        "ops_per_block": OPS,
        "us_per_op": {p: statistics.median(v) * 1e6 for p, v in res.items()},
        "ratio_to_no_hook": {p: statistics.median(v) / base for p, v in res.items()},
        "cpu_us_per_op": {p: statistics.median(v) * 1e6 for p, v in cpu.items()},
        "events_made_unpooled": unpooled.events_created,
        "events_made_pooled": pooled.events_created,
        "pooled_pairs_made_per_block": new_pairs,
        "records_per_block": counts,
        "stats": rec.stats,
        "TORCH_NCCL_ENABLE_TIMING": os.environ.get("TORCH_NCCL_ENABLE_TIMING"),
    }
    checks = {
        "unpooled wrapper records every op": all(c >= OPS for c in counts["unpooled"]),
        "pooled wrapper records every op": all(c >= OPS for c in counts["pooled"]),
        "pooled: at most one pair per op of one block": pooled.events_created <= 2 * OPS,
        "unpooled: two events per op": unpooled.events_created == 2 * OPS * ROUNDS,
        "no op untimed": rec.stats.get("cuda_untimed", 0) == 0,
        "no hook posts nothing": all(c == 0 for c in counts["none"]),
        "flight recorder present": fr is not None,
    }
    if fr is not None:
        mine = [c for c in got if c.get("op") == "all_reduce" and c.get("bytes") == 4096]
        checks["recorder records every op"] = all(c >= OPS for c in counts["recorder"])
        checks["records have seq and a duration"] = bool(mine) and all(
            "seq" in c and c["end"] > c["start"] for c in mine[-OPS:]
        )
    out["checks"] = checks
    (OUT / "hook_paths.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    dist.destroy_process_group()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
