"""A rank of a real gloo job whose collectives the torch.distributed wrapper cannot see.

Per step: DDP's own bucket all-reduce (no comm hook), a ``torch.compile``d function issuing the
functional all-reduce (``_c10d_functional``), and ``all_reduce`` bound by ``from torch.distributed
import all_reduce`` before the hook started. Only the Flight Recorder lists all three. ``--out``
gets what the rank issued per step and the hook's stats.

torch.compile runs with the ``aot_eager`` backend: dynamo traces the function and AOTAutograd
lowers it to the functional collective ops, as in any compiled model; inductor's C++ code
generation, which adds nothing to what is issued, took 85 s per rank on the 2-core test machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.distributed import all_reduce as bound_early  # bound before the hook exists

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo, for fabricscope.training


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from fabricscope.training import Recorder

    rec = Recorder().start()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))  # 1,088 bytes of grads

    @torch.compile(backend="aot_eager", fullgraph=True)
    def compiled(x: torch.Tensor) -> torch.Tensor:
        return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

    issued: list[tuple[int, str, int]] = []
    for step in range(a.steps):
        with rec.step(step):
            model(torch.randn(4, 16)).sum().backward()
            issued.append((step, "all_reduce", 16 * 16 * 4 + 16 * 4))
            compiled(torch.ones(8))
            issued.append((step, "all_reduce", 32))
            bound_early(torch.ones(4))
            issued.append((step, "all_reduce", 16))
    dist.barrier()
    rec.close(timeout_s=10)
    Path(a.out).write_text(json.dumps({"rank": rank, "issued": issued, "stats": rec.stats}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
