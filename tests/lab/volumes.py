"""The lab's loop-device volumes: each host's checkpoint volume and the shared dataset volume.

Every backing file lives under ``/run/<prefix>``, so teardown finds the loops again by path
(``lab_loops``), after a crash too.

The shared dataset volume is two loop devices: a "disk" (loop over ``/run/<prefix>/dataset-disk.img``,
the storage system's own disk) and the volume on it (a loop over that disk with direct I/O, ext4,
mounted at ``/run/<prefix>/dataset``). Why two: blk-throttle holds a bio before the block layer
allocates its request, so a throttle on the mounted device itself never shows in that device's
``/proc/diskstats`` (measured on this kernel, 6.18: 4 MB/s read limit, 256 KB O_DIRECT reads took
62 ms each and the device counted 0.1 ms per read). Throttled one level down, the wait is inside the
volume's own requests: its diskstats read time carries it (62 ms per read), as an NFS volume's does
when the server's disk is slow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.lab.shell import LabError, sh
from tests.lab.spec import LabSpec

VOLUME_MB = 96
DATASET_MB = 64  # the shared dataset volume: one shard per host
SHARD_MB = 8  # each host's shard; ranks read it in chunks with O_DIRECT, so its size only sets the cycle


def volume_dir(spec: LabSpec, host: str) -> Path:
    return spec.run_dir / host / "ckpt"


def make_volume(spec: LabSpec, host: str) -> str:
    """An ext4 file system on a loop device (backing file in /run/<prefix>) mounted for the host's
    checkpoints. Returns the loop device."""
    img = spec.run_dir / f"{host}.img"
    with img.open("wb") as f:
        f.truncate(VOLUME_MB << 20)
    dev = sh("losetup", "--find", "--show", str(img)).strip()
    sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
    mnt = volume_dir(spec, host)
    mnt.mkdir(parents=True, exist_ok=True)
    sh("mount", dev, str(mnt))
    return dev


def dataset_dir(spec: LabSpec) -> Path:
    return spec.run_dir / "dataset"


def shard_path(spec: LabSpec, host: str) -> Path:
    return dataset_dir(spec) / f"shard-{host}"


def make_dataset(spec: LabSpec) -> str:
    """The shared dataset volume: ext4 on a direct-I/O loop over the storage system's "disk" (a
    second loop device), mounted at ``dataset_dir``, with one shard of random bytes per host.
    Returns the volume's loop device."""
    img = spec.run_dir / "dataset-disk.img"
    with img.open("wb") as f:
        f.truncate(DATASET_MB << 20)
    disk = sh("losetup", "--find", "--show", str(img)).strip()
    # direct I/O: the volume's reads reach the disk as bios of the reading task's cgroup (loop
    # workers are per blkcg), not through the page cache of the disk's device node
    dev = sh("losetup", "--find", "--show", "--direct-io=on", disk).strip()
    sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
    mnt = dataset_dir(spec)
    mnt.mkdir(parents=True, exist_ok=True)
    sh("mount", dev, str(mnt))
    for h in spec.hosts:
        with shard_path(spec, h).open("wb") as f:
            for _ in range(SHARD_MB):
                f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
    return dev


def _loops() -> list[dict[str, str]]:
    try:
        out = json.loads(sh("losetup", "-J", "-l", check=False) or '{"loopdevices": []}')["loopdevices"]
    except (json.JSONDecodeError, KeyError):
        return []
    return [d for d in out if isinstance(d, dict) and d.get("name")]


def _back_file(d: dict[str, str]) -> str:
    return (d.get("back-file") or "").split(" ")[0]


def _majmin(dev: str) -> str:
    st = os.stat(dev)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def loop_of(spec: LabSpec, host: str) -> str:
    """major:minor of the loop device behind a host's checkpoint volume."""
    img = str(spec.run_dir / f"{host}.img")
    for d in _loops():
        if _back_file(d) == img:
            return _majmin(d["name"])
    raise LabError(f"no loop device for {img}")


def dataset_devices(spec: LabSpec) -> tuple[str, str]:
    """(disk, volume) loop devices of the shared dataset volume, e.g. ``/dev/loop4``, ``/dev/loop5``."""
    img = str(spec.run_dir / "dataset-disk.img")
    loops = _loops()
    disk = next((d["name"] for d in loops if _back_file(d) == img), None)
    vol = next((d["name"] for d in loops if disk and _back_file(d) == disk), None)
    if disk is None or vol is None:
        raise LabError(f"no dataset volume for {img}")
    return disk, vol


def dataset_disk(spec: LabSpec) -> str:
    """major:minor of the dataset volume's disk: where a read throttle shows in the volume's counters."""
    return _majmin(dataset_devices(spec)[0])


def lab_loops(spec: LabSpec) -> list[str]:
    """The lab's loop devices, each before the one it sits on: those backed by files under
    ``/run/<prefix>``, and loops backed by those (the dataset volume on its disk)."""
    loops = _loops()
    found = [d["name"] for d in loops if _back_file(d).startswith(str(spec.run_dir) + "/")]
    while True:
        more = [d["name"] for d in loops if _back_file(d) in found and d["name"] not in found]
        if not more:
            return list(reversed(found))
        found += more
