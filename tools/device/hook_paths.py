"""µs per collective for each way the training hook times collectives, on one CUDA GPU (issue #45).

    PYTHONPATH=. python3 tools/device/hook_paths.py OUTDIR        # about 30 s; needs torch with CUDA

A one-rank NCCL job all-reduces a 4 KiB tensor in alternating blocks with: no hook, the wrapper (two
CUDA events per op, the hook before #45; pooled when the torch build lets events be reused), and
the Flight Recorder path (nothing on the training thread; NCCL's own timing, enabled by the hook
with ``TORCH_NCCL_ENABLE_TIMING=1`` before the process group exists). Each block ends with a
device sync, so wall time per op includes the GPU work. Printed and written to OUTDIR/hook_paths.json:
µs per op per path and the ratio to no hook in the same run. Self-checks (exit 1 when one fails):
every path's records arrive at a local receiver (at least one per op: the reader keeps listing the
ring while the wrapper blocks run, so those blocks count both), with seq and a positive duration.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from receiver import start_receiver  # tools/device/receiver.py, beside this script

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
        before = len(got)
        rec.flush(30)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with rec.step(len(per)):
            for _ in range(OPS):
                dist.all_reduce(x)
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / OPS
        rec.flush(30)
        if fr is not None:
            fr.poll()
        rec.flush(30)
        counts[path].append(len(got) - before)
        return dt

    paths = ["none", "wrapper"] + (["recorder"] if fr is not None else [])
    res: dict[str, list[float]] = {p: [] for p in paths}
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
        "records_per_block": counts,
        "stats": rec.stats,
        "TORCH_NCCL_ENABLE_TIMING": os.environ.get("TORCH_NCCL_ENABLE_TIMING"),
    }
    checks = {
        "wrapper records every op": all(c >= OPS for c in counts["wrapper"]),
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
