"""Names drawn at random per run (#15): hosts, switches, NIC interfaces, switch ports, GPUs, storage
devices and volumes, each from one of several styles real clusters use (`gpu-a17`, `dgx0412`,
`r12-sw3`, `Ethernet48`, `swp12s1`, `et-0/0/12`, `mlx5_3`, `ens4f1np1`, `/lustre/scratch`, `vol7`, hex).

No name says what a thing does: leaves and spines share one style and one numbering (shuffled), the
data and checkpoint mounts come from one pool in random order, and no pool holds a role word
(leaf, spine, tor, ckpt, checkpoint, data, shared). The engine has to learn roles from the links,
the job's placement and the hook's events, as it would on a cluster it has never seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Substrings no drawn name may contain: each would tell a role apart.
ROLE_WORDS = ("leaf", "spine", "ckpt", "checkpoint", "data", "shared", "uplink", "downlink")
_ALNUM = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
_HEX = np.array(list("0123456789abcdef"))


def _pick(rng: np.random.Generator, options: list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _chars(rng: np.random.Generator, alphabet: np.ndarray, n: int) -> str:
    return "".join(rng.choice(alphabet, n))


def _numbers(rng: np.random.Generator, n: int, lo: int, span: int) -> list[int]:
    """`n` distinct numbers from [lo, lo + max(span, 2n)), in increasing order (gaps, as racks have)."""
    pool = rng.choice(max(span, 2 * n), n, replace=False) + lo
    return sorted(int(x) for x in pool)


def _unique(rng: np.random.Generator, n: int, draw: Callable[[np.random.Generator, int], str]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        name = draw(rng, len(out))
        if name not in seen and not any(w in name.lower() for w in ROLE_WORDS):
            seen.add(name)
            out.append(name)
    return out


def host_names(rng: np.random.Generator, n: int) -> list[str]:
    style = int(rng.integers(6))
    if style == 5:  # random hex, as some provisioning systems do
        k = int(rng.integers(6, 11))
        return _unique(rng, n, lambda r, _i: _chars(r, _HEX, k))
    nums = _numbers(rng, n, int(rng.integers(0, 40)), int(rng.integers(n, 4 * n + 8)))
    width = max(2, len(str(nums[-1])), int(rng.integers(2, 5)))
    prefix = _pick(rng, ["gpu", "node", "hgx", "compute", "c", "ml", "trn", "worker"])
    letter = str(rng.choice(list("abcdefgh")))
    per_rack = int(rng.integers(2, 9))
    fmt = [lambda x: f"{prefix}-{letter}{x}",  # gpu-a17
           lambda x: f"dgx{x:0{width}d}",  # dgx0412
           lambda x: f"n{x // per_rack + 1}c{x % per_rack + 1}",  # n7c3: node 7, chassis 3
           lambda x: f"{prefix}{x:0{width}d}",  # node07
           lambda x: f"r{x // per_rack + 1:02d}u{2 * (x % per_rack) + 3:02d}"][style]  # rack, unit
    return _unique(rng, n, lambda _r, i: fmt(nums[i]))


def switch_names(rng: np.random.Generator, n: int) -> list[str]:
    """Names for all `n` switches of the fabric: one style and numbering, shuffled, so a name never
    tells a leaf from a spine."""
    style = int(rng.integers(5))
    if style == 4:
        return _unique(rng, n, lambda r, _i: "sw" + _chars(r, _HEX, 6))
    nums = _numbers(rng, n, int(rng.integers(1, 30)), int(rng.integers(n, 3 * n + 6)))
    rack = int(rng.integers(1, 40))
    site = _pick(rng, ["ams", "dfw", "iad", "sjc", "b2", "hall3"])
    fmt = [lambda x: f"r{rack}-sw{x}", lambda x: f"sw{x:03d}", lambda x: f"{site}-net-{x:02d}",
           lambda x: f"ib-{x:02d}"][style]
    names = [fmt(x) for x in nums]
    rng.shuffle(names)  # leaves are taken first: without the shuffle the lower numbers would be leaves
    return names


def port_names(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct port names of one switch OS style, in port order (the same style fabric-wide: call
    with a generator seeded alike for every switch, or slice one list)."""
    style = int(rng.integers(6))
    first = int(rng.integers(0, 2))
    lanes = int(rng.choice([1, 4, 8]))
    fmt = [lambda i: f"Ethernet{lanes * i}",  # SONiC numbers ports by their first lane: Ethernet0, 4, 8..
           lambda i: f"swp{i // 4 + 1}s{i % 4}",  # Cumulus breakout: swp12s1
           lambda i: f"et-0/0/{i + first}",  # Junos
           lambda i: f"Eth1/{i + 1}",  # NX-OS
           lambda i: f"p{i + first}",
           lambda i: f"1/1/{i + 1}"][style]
    return [fmt(i) for i in range(n)]


def nic_names(rng: np.random.Generator, n: int, fabric: str) -> list[str]:
    """Interface names of a host's `n` NICs (the same on every host, as on a uniform fleet)."""
    style = int(rng.integers(5))
    base = int(rng.integers(0, 4))
    fmt = [lambda i: f"mlx5_{i + base}", lambda i: f"ens{i + base + 1}f{i % 2}np{i % 2}",
           lambda i: f"enp{16 * (i + base) + 1}s0f{i % 2}", lambda i: f"ibp{i + base}s0" if fabric == "ib"
           else f"eth{i + base}", lambda i: f"rdma{i + base}"][style]
    return [fmt(i) for i in range(n)]


def gpu_names(rng: np.random.Generator, n: int) -> list[str]:
    style = int(rng.integers(4))
    fmt = [lambda i: f"gpu{i}", lambda i: f"GPU{i}", lambda i: f"cuda{i}", lambda i: f"nv{i}"][style]
    return [fmt(i) for i in range(n)]


def mount_names(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct local mount points (absolute paths: a mount point is one), order random."""
    pool = ["/raid", "/scratch", "/local", "/mnt/nvme0", "/mnt/nvme1", "/mnt/md0", "/mnt/weka", "/lustre/scratch",
            "/fsx", "/gpfs/work", "/nvme", "/mnt/local0", "/var/lib/train", "/home/job", "/mnt/beegfs", "/work"]
    out = [str(x) for x in rng.choice(pool, n, replace=False)] if n <= len(pool) else []
    while len(out) < n:
        name = f"/{_chars(rng, _ALNUM, 3)}/{_chars(rng, _ALNUM, 6)}"
        if name not in out:
            out.append(name)
    return out


def storage_names(rng: np.random.Generator) -> tuple[str, str]:
    """A storage system and the volume it serves every host."""
    device = _pick(rng, [f"store{int(rng.integers(1, 9))}", f"vast{int(rng.integers(1, 9))}",
                         f"fs-{_chars(rng, _ALNUM, 2)}", f"ddn{int(rng.integers(1, 20)):02d}",
                         "nas" + _chars(rng, _HEX, 4), f"weka-{int(rng.integers(1, 9))}"])
    volume = _pick(rng, [f"vol{int(rng.integers(0, 30))}", "/lustre/scratch", "/mnt/weka", "/export/home",
                         f"/fs{int(rng.integers(1, 5))}/proj", "lv_" + _chars(rng, _HEX, 5), _chars(rng, _HEX, 8)])
    return device, volume


@dataclass(frozen=True)
class Names:
    """Every name of one cluster. `switches[:leaves]` are the leaves, the rest spines."""

    hosts: list[str]
    switches: list[str]
    ports: list[str]  # per switch, in port order
    nics: list[str]  # interface names per host
    gpus: list[str]
    mounts: tuple[str, str]  # (data loader's, checkpoint's): same pool, random order
    storage_device: str
    shared_volume: str


def draw_names(seed: int, *, hosts: int, switches: int, ports: int, nics: int, gpus: int, fabric: str) -> Names:
    """All names of a cluster from `seed` (deterministic): each kind from a generator of its own, so
    a cluster of another size keeps the styles of the same seed."""
    def r(k: int) -> np.random.Generator:
        return np.random.default_rng([seed, 15, k])

    a, b = mount_names(r(5), 2)
    dev, vol = storage_names(r(6))
    return Names(host_names(r(0), hosts), switch_names(r(1), switches), port_names(r(2), ports),
                 nic_names(r(3), nics, fabric), gpu_names(r(4), gpus), (a, b), dev, vol)
