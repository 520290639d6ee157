"""One rank of the lab's training job: data-parallel MLP on CPU over gloo, with the hook on.

Run by the lab inside a host namespace (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``,
``GLOO_SOCKET_IFNAME`` and ``FABRICSCOPE_*`` set). Each step: read the next chunk of the host's
shard from the shared dataset volume and make a batch (``data``), forward and backward
(``forward_backward``), one gradient all-reduce (timed by the hook), SGD (``optimizer``);
every ``FSLAB_CKPT_EVERY`` steps each rank saves its state to its host's checkpoint volume with an
fsync (``checkpoint``) and the ranks meet at a barrier, as synchronous checkpointing does. The
all-reduced buffer carries one extra element, rank 0's stop flag, so all ranks stop at the same
step without an extra collective.

The shard is read with ``O_DIRECT``: every step's read goes to the volume's block device, as a
loader streaming a dataset larger than memory does. The page cache would otherwise serve the 8 MB
shard from memory after its first pass and hide a slow volume. ``posix_fadvise(DONTNEED)`` is only
advice (it leaves pages it cannot drop, and read-ahead refills the cache ahead of the reader), and
fresh offsets would need a shard as large as the whole run's reads.
"""

from __future__ import annotations

import mmap
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from fabricscope.collectors.training import Recorder


class Shard:
    """Sequential ``O_DIRECT`` reads of a file in fixed chunks, wrapping at its end."""

    def __init__(self, path: str, chunk: int) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        self.size = os.fstat(self.fd).st_size // chunk * chunk
        self.buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT requires
        self.chunk, self.off = chunk, 0

    def read(self) -> int:
        n = os.preadv(self.fd, [self.buf], self.off)
        self.off = (self.off + self.chunk) % self.size
        return n


def main() -> None:
    rec = Recorder().start()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world, timeout=timedelta(seconds=120))
    width = int(os.environ.get("FSLAB_WIDTH", "1024"))
    batch = int(os.environ.get("FSLAB_BATCH", "256"))
    ckpt_every = int(os.environ.get("FSLAB_CKPT_EVERY", "5"))
    ckpt_dir = Path(os.environ["FSLAB_CKPT_DIR"])
    stop_file = Path(os.environ["FSLAB_STOP"])
    max_s = float(os.environ.get("FSLAB_MAX_S", "900"))
    shard = Shard(os.environ["FSLAB_DATA_FILE"], int(os.environ.get("FSLAB_DATA_KB", "512")) << 10)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(rank)
    t_end = time.time() + max_s
    step = 0
    while True:
        with rec.step(step):
            rec.phase("data")
            shard.read()
            x = torch.randn(batch, 512, generator=gen)
            y = torch.randint(0, 10, (batch,), generator=gen)
            rec.phase("forward_backward")
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            rec.phase_end()
            stop = 1.0 if rank == 0 and (stop_file.exists() or time.time() > t_end) else 0.0
            grads = [p.grad for p in params if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([stop])])
            dist.all_reduce(flat)
            rec.phase("optimizer")
            off = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[off:off + n].view_as(g).div_(world))
                off += n
            opt.step()
            if ckpt_every and step and step % ckpt_every == 0:
                path = ckpt_dir / f"rank{rank}.pt"
                with rec.checkpoint(str(path)), open(path, "wb") as f:
                    torch.save(model.state_dict(), f)
                    f.flush()
                    os.fsync(f.fileno())
                dist.barrier()
        if flat[-1].item() > 0:
            break
        step += 1
    dist.destroy_process_group()
    rec.close()


if __name__ == "__main__":
    main()
