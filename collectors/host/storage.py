"""Storage collector: block devices (``/proc/diskstats``), NFS client mounts
(``/proc/self/mountstats``), Lustre client ``llite`` stats, and free space of named volumes.

Parsers are pure. Latency gauges (``read_latency_seconds``) are the mean time per operation over
the last interval, so they need two polls: :class:`IntervalMean` keeps the previous cumulative
(ops, time) and uses :mod:`fabricscope.core.rates` so a wrap or reset gives no value, never a wild one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.common import extra_counter, read_text, select, snake
from fabricscope.collectors.host.nfs import nfs_samples, parse_mountstats, visible_mounts
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import ParseError
from fabricscope.core.model import Sample, now
from fabricscope.core.rates import counter_deltas

log = logging.getLogger(__name__)

SECTOR = 512.0  # diskstats sectors are always 512 bytes, whatever the device's block size
DISKSTAT_FIELDS = ("reads", "reads_merged", "sectors_read", "read_ms", "writes", "writes_merged",
                   "sectors_written", "write_ms", "in_progress", "io_ms", "weighted_io_ms",
                   "discards", "discards_merged", "sectors_discarded", "discard_ms", "flushes", "flush_ms")
# Linux 2.4-style partition rows carry only these four.
DISKSTAT_SHORT = ("reads", "sectors_read", "writes", "sectors_written")
# field -> (metric, scale); fields not listed are not emitted.
DISK_METRICS: dict[str, tuple[str, float]] = {
    "reads": ("read_ops_total", 1.0),
    "writes": ("write_ops_total", 1.0),
    "sectors_read": ("read_bytes_total", SECTOR),
    "sectors_written": ("write_bytes_total", SECTOR),
    "read_ms": ("read_time_seconds_total", 1e-3),
    "write_ms": ("write_time_seconds_total", 1e-3),
    "io_ms": ("io_time_seconds_total", 1e-3),
    "weighted_io_ms": ("io_queue_time_seconds_total", 1e-3),
    "in_progress": ("io_in_progress", 1.0),
    "discards": ("discard_ops_total", 1.0),
    "flushes": ("flush_ops_total", 1.0),
}


def parse_diskstats(text: str) -> dict[str, dict[str, float]]:
    """``/proc/diskstats`` -> {device: {field: value}}; 4-, 11-, 15- and 17-field rows."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7:
            continue
        try:
            values = [float(int(v)) for v in parts[3:]]
        except ValueError:
            continue
        names = DISKSTAT_SHORT if len(values) == 4 else DISKSTAT_FIELDS
        out[parts[2]] = dict(zip(names, values, strict=False))
    if not out and text.strip():
        raise ParseError("no diskstats rows")
    return out


def disk_samples(stats: Mapping[str, float], ts: float, source: str) -> list[Sample]:
    return [Sample(ts, source, metric, stats[f] * scale)
            for f, (metric, scale) in DISK_METRICS.items() if f in stats]


LPROCFS_HEADERS = ("snapshot_time", "start_time", "elapsed_time")


def read_lprocfs_stats(text: str) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Lustre ``stats`` files: ``name COUNT samples [unit] min max sum [sumsq]`` per line -> (rows, problems).

    A name listed more than once (Lustre 2.10's obdfilter prints its own ``statfs`` and the generic OBD
    one) keeps its first row; each later one is a problem line, never a silent overwrite. A line that is
    neither a header (snapshot/start/elapsed time) nor a counter row is a problem line."""
    out: dict[str, dict[str, float]] = {}
    again: dict[str, list[str]] = {}
    problems: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] in LPROCFS_HEADERS:
            continue
        if len(parts) < 4 or parts[2] != "samples" or not parts[1].isdigit():
            problems.append(f"line not an lprocfs counter, skipped: {line.strip()[:60]!r}")
            continue
        if parts[0] in out:
            again.setdefault(parts[0], [f"{out[parts[0]]['count']:.0f}"]).append(parts[1])
            continue
        row = {"count": float(parts[1])}
        unit = parts[3].strip("[]")
        for key, value in zip(("min", "max", "sum", "sumsq"), parts[4:], strict=False):
            if value.isdigit():
                row[key] = float(value)
        row["usecs"] = 1.0 if unit in ("usec", "usecs") else 0.0  # lprocfs prints "[usec]"
        out[parts[0]] = row
    if not out and text.strip():
        raise ParseError("no lprocfs 'samples' rows")
    problems += [f"{name} listed {len(counts)} times ({', '.join(counts)} samples): the first kept, the others "
                 "skipped (two counters under one name)" for name, counts in again.items()]
    return out, problems


def parse_lprocfs_stats(text: str) -> dict[str, dict[str, float]]:
    """The counter rows of a Lustre ``stats`` file (see ``read_lprocfs_stats``; problems dropped)."""
    return read_lprocfs_stats(text)[0]


def lustre_samples(stats: Mapping[str, Mapping[str, float]], ts: float, source: str) -> list[Sample]:
    out: list[Sample] = []
    for name, row in stats.items():
        if name in ("read_bytes", "write_bytes"):
            op = name.split("_")[0]
            out.append(Sample(ts, source, f"{op}_ops_total", row["count"]))
            out.append(Sample(ts, source, f"{op}_bytes_total", row.get("sum", 0.0)))
            continue
        out.append(Sample(ts, source, extra_counter("lustre", name), row["count"]))
        if row.get("usecs") and "sum" in row:
            out.append(Sample(ts, source, f"lustre_{snake(name)}_seconds_total", row["sum"] / 1e6))
    return out


class IntervalMean:
    """Mean seconds per operation between the previous and the current poll, per key."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], tuple[float, float]] = {}

    def update(self, items: Sequence[tuple[str, str, float, float]]) -> dict[tuple[str, str], float]:
        """``items`` are (source, metric, ops_total, seconds_total); returns means where defined."""
        keys = [(s, m) for s, m, _, _ in items]
        prev = np.array([self._prev.get(k, (np.nan, np.nan)) for k in keys], dtype=np.float64).reshape(-1, 2)
        cur = np.array([(o, t) for _, _, o, t in items], dtype=np.float64).reshape(-1, 2)
        self._prev = dict(zip(keys, map(tuple, cur), strict=True))
        d_ops = counter_deltas(prev[:, 0], cur[:, 0])
        d_time = counter_deltas(prev[:, 1], cur[:, 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = d_time / d_ops
        # No ops in the interval: the mean is undefined, so it is absent (not 0, not -1).
        return {k: float(v) for k, v, n in zip(keys, mean, d_ops, strict=True) if n > 0 and np.isfinite(v)}


class StorageCollector:
    """Disks, NFS mounts, Lustre llite instances and volumes of one host.

    ``disk_sources`` names a disk's source outright (kernel disk -> source): a storage server's
    agent reports the block device behind a volume it serves under the volume's source as the
    topology declares it (``store1:vol0``), not as ``<host>:<disk>``; the kernel's name of the
    disk (``loop5``, ``dm-3``) says nothing about which volume it is."""

    name = "storage"

    def __init__(self, host: str, *, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys"),
                 disks_include: Sequence[str] = (), disks_exclude: Sequence[str] = ("loop*", "ram*", "zram*",
                 "sr*", "fd*"), volumes: Sequence[str] = (), disk_sources: Mapping[str, str] | None = None) -> None:
        self.host, self.proc_root, self.sys_root = host, proc_root, sys_root
        self.disks_include, self.disks_exclude, self.volumes = disks_include, disks_exclude, volumes
        self.disk_sources = dict(disk_sources or {})
        self.latency = IntervalMean()

    def _disks(self, ts: float) -> tuple[list[Sample], list[tuple[str, str, float, float]]]:
        text = read_text(self.proc_root / "diskstats") or ""
        try:
            stats = parse_diskstats(text)
        except ParseError as exc:
            log.warning("storage %s: /proc/diskstats: %s; disks skipped", self.host, exc)
            return [], []
        out, lat = [], []
        for dev in select(stats, self.disks_include, self.disks_exclude):
            src, f = self.disk_sources.get(dev, f"{self.host}:{dev}"), stats[dev]
            out.extend(disk_samples(f, ts, src))
            for op in ("read", "write"):
                if f"{op}s" in f and f"{op}_ms" in f:
                    lat.append((src, f"{op}_latency_seconds", f[f"{op}s"], f[f"{op}_ms"] / 1e3))
        return out, lat

    def _nfs(self, ts: float) -> tuple[list[Sample], list[tuple[str, str, float, float]]]:
        out, lat = [], []
        mounts, problems = visible_mounts(parse_mountstats(read_text(self.proc_root / "self/mountstats") or ""))
        if problems:
            report_problems(self.host, "nfs-mountstats", problems, log)
        for mount in mounts:
            src = f"{self.host}:{mount.mountpoint}"
            out.extend(nfs_samples(mount, ts, src))
            for op in ("READ", "WRITE"):
                if op in mount.ops:
                    f = mount.ops[op]
                    lat.append((src, f"{op.lower()}_latency_seconds", f["ops"], f["execute_ms"] / 1e3))
        return out, lat

    def _lustre(self, ts: float) -> list[Sample]:
        mounts = {}  # fsname -> mountpoint, from "mgs@tcp:/fsname /mnt/x lustre ..."
        for line in (read_text(self.proc_root / "mounts") or "").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "lustre" and ":/" in parts[0]:
                mounts[parts[0].rsplit(":/", 1)[1]] = parts[1]
        out: list[Sample] = []
        for base in (self.proc_root / "fs/lustre/llite", self.sys_root / "kernel/debug/lustre/llite"):
            for inst in _listdir(base):
                text = read_text(base / inst / "stats")
                if text is None:
                    continue
                fsname = inst.rsplit("-", 1)[0]
                src = f"{self.host}:{mounts.get(fsname, 'lustre/' + inst)}"
                try:
                    rows, problems = read_lprocfs_stats(text)
                except ParseError as exc:
                    log.warning("storage %s: llite %s: %s; skipped", self.host, inst, exc)
                    continue
                if problems:
                    report_problems(src, "lustre-stats", problems, log)
                out.extend(lustre_samples(rows, ts, src))
        return out

    def _volumes(self, ts: float) -> list[Sample]:
        out = []
        for path in self.volumes:
            try:
                st = os.statvfs(path)
            except OSError as exc:
                log.warning("storage %s:%s: statvfs failed: %s", self.host, path, exc)
                continue
            src = f"{self.host}:{path}"
            out.append(Sample(ts, src, "free_bytes", float(st.f_bavail * st.f_frsize)))
            out.append(Sample(ts, src, "size_bytes", float(st.f_blocks * st.f_frsize)))
        return out

    def poll(self) -> list[Sample]:
        ts = now()
        disks, lat_d = self._disks(ts)
        nfs, lat_n = self._nfs(ts)
        out = disks + nfs + self._lustre(ts) + self._volumes(ts)
        for (src, metric), value in self.latency.update(lat_d + lat_n).items():
            out.append(Sample(ts, src, metric, value))
        return out


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_diskstats(path: Path, device: str, ts: float) -> Reading:
    stats = parse_diskstats(path.read_text())
    return Reading(samples=[s for dev, fields in stats.items() for s in disk_samples(fields, ts, f"{device}:{dev}")])


def _looks_like_diskstats(_path: Path, head: str) -> bool:
    rows = [line.split() for line in head.splitlines()[:5] if line.strip()]
    return bool(rows) and all(len(r) in (7, 14, 18, 20) and r[0].isdigit() and r[1].isdigit() for r in rows)


def _read_mountstats(path: Path, device: str, ts: float) -> Reading:
    mounts, problems = visible_mounts(parse_mountstats(path.read_text()))
    if not mounts:
        raise ParseError("no NFS mount in it (only nfs/nfs4 mounts are read)")
    return Reading(samples=[s for m in mounts for s in nfs_samples(m, ts, f"{device}:{m.mountpoint}")],
                   problems=problems + [p for m in mounts for p in m.problems()])


def _read_lustre(path: Path, device: str, ts: float) -> Reading:
    rows, problems = read_lprocfs_stats(path.read_text())
    return Reading(samples=lustre_samples(rows, ts, device), problems=problems)


def _looks_like_lustre(_path: Path, head: str) -> bool:
    rows = [line.split() for line in head.splitlines()[:6] if line.strip()]
    return any(len(r) >= 4 and r[2] == "samples" for r in rows) and rows[0][0] == "snapshot_time"


FORMATS = (
    Format("diskstats", "/proc/diskstats (block device I/O counters; counters, so rates need two reads)",
           sniff=_looks_like_diskstats, read=_read_diskstats),
    Format("nfs-mountstats", "/proc/self/mountstats (NFS client: bytes, per-op counts, RTT, retransmits)",
           sniff=lambda _p, head: head.startswith("device ") and " mounted on " in head.split("\n", 1)[0],
           read=_read_mountstats),
    Format("lustre-stats", "a Lustre lprocfs `stats` file (llite, obdfilter, mdt: NAME COUNT samples [unit] ...)",
           sniff=_looks_like_lustre, read=_read_lustre),
)
