"""NIC collector: ``/sys/class/net/<if>`` statistics and state, plus driver counters (``ethtool -S``).

Fetch reads sysfs files and the driver's stats (SIOCETHTOOL ioctl, or the ``ethtool`` binary);
parse is pure: :func:`parse_ethtool_stats` (text) -> dict, :func:`map_ethtool` (dict, driver) and
:func:`parse_netdev` (sysfs files) -> samples. Where both give the same (metric, labels), the driver
counter wins: on RDMA NICs the port (``*_phy``) counters include RoCE traffic the netdev never sees.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.common import extra_counter, read_attr, read_text, select
from fabricscope.collectors.host.ethtool_maps import DRIVERS, DriverMap, driver_map

# The text parser lives in ethtool_text; its names stay importable from here, where callers found them.
from fabricscope.collectors.host.ethtool_text import parse_ethtool_stats as parse_ethtool_stats
from fabricscope.collectors.host.ethtool_text import read_ethtool_text as read_ethtool_text
from fabricscope.collectors.host.ethtool_text import sniff_driver as sniff_driver
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now
from fabricscope.core.values import BadValue, counter

log = logging.getLogger(__name__)

# /sys/class/net/<if>/statistics/<file> -> canonical metric; other files become netdev_<file>_total.
NETDEV_STATS: dict[str, str] = {
    "rx_bytes": "rx_bytes_total",
    "tx_bytes": "tx_bytes_total",
    "rx_packets": "rx_packets_total",
    "tx_packets": "tx_packets_total",
    "rx_errors": "rx_errors_total",
    "tx_errors": "tx_errors_total",
    "rx_dropped": "rx_discards_total",
    "tx_dropped": "tx_discards_total",
    "rx_crc_errors": "rx_fcs_errors_total",
    # Drivers report "no receive buffer" drops here (mlx5 copies rx_out_of_buffer into it).
    "rx_missed_errors": "rx_out_of_buffer_total",
}
# Files outside statistics/ that the collector reads.
STATE_FILES: tuple[str, ...] = ("operstate", "carrier", "speed", "carrier_changes", "carrier_down_count")
LEAN_STATE_FILES: tuple[str, ...] = ("operstate", "carrier", "carrier_down_count")
OPER_UP = {"up": 1.0, "down": 0.0, "lowerlayerdown": 0.0, "dormant": 0.0, "notpresent": 0.0, "testing": 0.0}
UNSUPPORTED_RETRY_S = 300.0
REFRESH_POLLS = 600  # the per-interface file lists are rebuilt this often (10 min at 1 s)


# (driver map, key) -> (metric, labels, scale, canonical?) or None (ignored). A driver's key set is
# fixed, so every key is matched against the regex table once per process, not once per poll
# (bench/agent_cost.py: this was 60% of a cycle's CPU on a 16-port mlx5 host).
_Resolved = tuple[str, tuple[tuple[str, str], ...], float, bool, str] | None
_RESOLVED: dict[tuple[str, str], _Resolved] = {}


def _resolve(dmap: DriverMap, key: str) -> _Resolved:
    cache_key = (dmap.name, key)
    if cache_key in _RESOLVED:
        return _RESOLVED[cache_key]
    found: _Resolved = None
    for rule in dmap.rules:
        m = rule.pattern.fullmatch(key)
        if m:
            groups = [g for g in m.groups() if g is not None]  # alternations leave unused groups None
            labels = tuple((k, v.format(None, *groups)) for k, v in rule.labels)
            found = (rule.metric, labels, rule.scale, True, rule.kind)
            break
    else:
        if not any(p.fullmatch(key) for p in dmap.ignore):
            found = (extra_counter("ethtool", key), (), 1.0, False, "counter")
    if len(_RESOLVED) > 200_000:  # bound it even if a driver invents keys (it should not)
        _RESOLVED.clear()
    _RESOLVED[cache_key] = found
    return found


def map_ethtool(stats: Mapping[str, float], driver: str | None, ts: float, source: str,
                extras: bool = True) -> list[Sample]:
    """Driver counters -> canonical samples via the driver's mapping table; the rest as extras."""
    dmap = driver_map(driver)
    summed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    out: list[Sample] = []
    for key, value in stats.items():
        res = _resolve(dmap, key)
        if res is None:
            continue
        metric, labels, scale, canonical, kind = res
        if canonical and kind == "gauge":  # a level: one key per series, never summed
            out.append(Sample(ts, source, metric, value * scale, dict(labels) if labels else None))
        elif canonical:
            summed[(metric, labels)] = summed.get((metric, labels), 0.0) + value * scale
        elif extras:
            out.append(Sample(ts, source, metric, value))
    for (metric, labels), value in summed.items():
        out.append(Sample(ts, source, metric, value, dict(labels) if labels else None))
    return out


def parse_netdev(files: Mapping[str, str], ts: float, source: str, extras: bool = True) -> list[Sample]:
    """Sysfs netdev files ({'statistics/rx_bytes': '123', 'operstate': 'up', ...}) -> samples."""
    out: list[Sample] = []
    for name, text in files.items():
        if not name.startswith("statistics/"):
            continue
        stat = name.removeprefix("statistics/")
        metric = NETDEV_STATS.get(stat) or (extra_counter("netdev", stat) if extras else None)
        if metric is None:
            continue
        try:
            out.append(Sample(ts, source, metric, counter(text)))
        except BadValue as exc:
            log.warning("nic %s: %s skipped: %s", source, name, exc)
    oper, carrier = OPER_UP.get(files.get("operstate", "")), files.get("carrier")
    if oper is None and carrier in ("0", "1"):  # "unknown" (lo, tun): trust carrier
        oper = float(carrier)
    elif oper == 1.0 and carrier == "0":
        # operstate follows the carrier asynchronously (linkwatch work): right after a loss of
        # carrier it may still say "up" for a while; the carrier bit is already down.
        oper = 0.0
    if oper is not None:
        out.append(Sample(ts, source, "oper_up", oper))
    speed = _int(files.get("speed"))
    if speed is not None and speed > 0:  # -1 / EINVAL when the link is down: absent
        out.append(Sample(ts, source, "speed_bps", speed * 1e6))
    downs = _int(files.get("carrier_down_count"))
    if downs is not None:
        out.append(Sample(ts, source, "link_down_total", float(downs)))
    changes = _int(files.get("carrier_changes"))
    if changes is not None:
        out.append(Sample(ts, source, "carrier_changes_total", float(changes)))
    return out


def merge(base: Iterable[Sample], override: Iterable[Sample]) -> list[Sample]:
    """Samples of ``base`` and ``override``; on the same (metric, labels) ``override`` wins."""
    def key(s: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
        return s.metric, tuple(sorted(s.labels.items())) if s.labels else ()

    out = {key(s): s for s in base}
    out.update((key(s), s) for s in override)
    return list(out.values())


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class EthtoolSource(Protocol):
    def stats(self, iface: str) -> tuple[str | None, dict[str, float]]: ...


class SubprocessEthtool:
    """Runs the ``ethtool`` binary (path injectable); the driver comes from ``ethtool -i``."""

    def __init__(self, binary: str = "ethtool", timeout_s: float = 5.0) -> None:
        self.binary, self.timeout_s = binary, timeout_s
        self._drivers: dict[str, str | None] = {}
        self.last_problems: dict[str, list[str]] = {}  # iface -> lines of its last output not read

    def _run(self, *args: str) -> str:
        try:
            proc = subprocess.run([self.binary, *args], capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CollectionError(f"{self.binary} {' '.join(args)}: {exc}") from exc
        if proc.returncode != 0:
            raise CollectionError(f"{self.binary} {' '.join(args)}: exit {proc.returncode}: "
                                  f"{proc.stderr.strip()[:200]}")
        return proc.stdout

    def stats(self, iface: str) -> tuple[str | None, dict[str, float]]:
        if iface not in self._drivers:
            info = dict(line.split(": ", 1) for line in self._run("-i", iface).splitlines() if ": " in line)
            self._drivers[iface] = info.get("driver") or None
        stats, self.last_problems[iface] = read_ethtool_text(self._run("-S", iface))
        if not stats:
            raise ParseError(f"{iface}: not ethtool -S output (no 'key: count' lines)")
        return self._drivers[iface], stats


class NicCollector:
    """All selected interfaces of one host: sysfs netdev counters/state + mapped driver counters."""

    name = "nic"

    def __init__(self, host: str, *, sys_root: Path = Path("/sys"), include: Sequence[str] = (),
                 exclude: Sequence[str] = ("lo",), ethtool: EthtoolSource | None = None,
                 extras: bool = True, extras_every: int = 1) -> None:
        self.host, self.sys_root, self.include, self.exclude = host, sys_root, include, exclude
        self.ethtool, self.extras = ethtool, extras
        # Extras (hundreds per mlx5 port) only every Nth poll: they are for digging, not alerting.
        self.extras_every, self._polls = max(1, extras_every), 0
        self._skip_until: dict[str, float] = {}  # interfaces whose driver has no ethtool stats
        self._dirs: dict[str, int] = {}  # interface -> descriptor of its sysfs directory
        self._files: dict[tuple[str, bool], list[str]] = {}  # (interface, lean) -> files a poll reads
        self._drivers: dict[str, str | None] = {}

    def interfaces(self) -> list[str]:
        try:
            names = os.listdir(self.sys_root / "class/net")
        except OSError as exc:
            raise CollectionError(f"cannot list {self.sys_root / 'class/net'}: {exc}") from exc
        return select(names, self.include, self.exclude)

    def _dir(self, iface: str) -> int | None:
        """An open descriptor of the interface's sysfs directory, kept between polls: each file is then
        opened relative to it (openat), so the kernel does not walk /sys/class/net/<if> (a symlink)
        for every one of ~15 files per interface per second (bench/agent_cost.py)."""
        fd = self._dirs.get(iface)
        if fd is None:
            try:
                fd = os.open(os.path.join(self.sys_root, "class/net", iface), os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return None
            self._dirs[iface] = fd
        return fd

    def _names(self, iface: str, fd: int, lean: bool) -> list[str]:
        """The files a poll reads, listed once per interface and mode (rebuilt every REFRESH_POLLS
        polls and when a read fails: a driver reload may add or remove statistics files)."""
        names = self._files.get((iface, lean))
        if names is None:
            stats, state = _listdir_at(fd, "statistics"), STATE_FILES
            if lean:
                # Do not read what will not be sent; speed and carrier_changes change rarely.
                stats, state = [f for f in stats if f in NETDEV_STATS], LEAN_STATE_FILES
            names = self._files[(iface, lean)] = [*state, *("statistics/" + f for f in stats)]
        return names

    def forget(self, iface: str) -> None:
        """Drop what is cached of ``iface`` (it vanished, or was deleted and created again)."""
        fd = self._dirs.pop(iface, None)
        if fd is not None:
            os.close(fd)
        self._drivers.pop(iface, None)  # a new interface of that name may have another driver
        for lean in (False, True):
            self._files.pop((iface, lean), None)

    def close(self) -> None:
        for iface in list(self._dirs):
            self.forget(iface)

    def fetch_sysfs(self, iface: str) -> dict[str, str]:
        lean = self.extras_every > 1 and self._polls % self.extras_every != 0
        for _ in range(2):  # a kept descriptor of a deleted-and-recreated interface reads nothing: once more
            fd = self._dir(iface)
            if fd is None:
                return {}
            files: dict[str, str] = {}
            for name in self._names(iface, fd, lean):
                text = read_attr(name, fd)
                if text is not None:
                    files[name] = text
                elif name.startswith("statistics/"):
                    self._files.pop((iface, lean), None)  # a statistics file went away: list them again
            if files:
                return files
            self.forget(iface)
        return {}

    def sysfs_driver(self, iface: str) -> str | None:
        if iface in self._drivers:  # a bound driver does not change under a live interface
            return self._drivers[iface]
        link = os.path.join(self.sys_root, "class/net", iface, "device/driver")
        try:
            driver: str | None = os.path.basename(os.readlink(link))
        except OSError:
            driver = None  # virtual interface (veth, bridge): no device link
        self._drivers[iface] = driver
        return driver

    def fetch_ethtool(self, iface: str) -> tuple[str | None, dict[str, float]]:
        if self.ethtool is None or self._skip_until.get(iface, 0.0) > time.monotonic():
            return None, {}
        try:
            return self.ethtool.stats(iface)
        except (CollectionError, ParseError) as exc:
            log.info("nic %s:%s: no driver counters (%s); retrying in %.0f s",
                     self.host, iface, exc, UNSUPPORTED_RETRY_S)
            self._skip_until[iface] = time.monotonic() + UNSUPPORTED_RETRY_S
            return None, {}

    def poll_iface(self, iface: str) -> list[Sample]:
        source = f"{self.host}:{iface}"
        ts = now()
        files = self.fetch_sysfs(iface)
        if not files:
            log.warning("nic %s: interface vanished or unreadable, skipped", source)
            return []
        driver, stats = self.fetch_ethtool(iface)
        # The kernel names the bound driver (/sys/class/net/IF/device/driver): no need to guess it.
        driver = self.sysfs_driver(iface) or driver
        problems = list(getattr(self.ethtool, "last_problems", {}).get(iface, []))
        if stats and driver is None:
            driver, guesses = sniff_driver(stats)
            problems += guesses
        elif stats and driver not in DRIVERS:
            problems.append(f"driver {driver!r} has no mapping table: its counters kept as extras only")
        report_problems(source, "ethtool-S", problems, log)
        extras = self.extras and self._polls % self.extras_every == 0
        return merge(parse_netdev(files, ts, source, extras), map_ethtool(stats, driver, ts, source, extras))

    def poll(self) -> list[Sample]:
        out: list[Sample] = []
        try:
            names = self.interfaces()
            refresh, present = self._polls % REFRESH_POLLS == 0, set(names)
            for iface in list(self._dirs):
                if refresh or iface not in present:
                    self.forget(iface)  # gone (veth of a finished container), or the periodic refresh
            for iface in names:
                out.extend(self.poll_iface(iface))
        finally:
            self._polls += 1  # after: the first poll (0) carries the extras
        return out


def _listdir_at(dir_fd: int, name: str) -> list[str]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return []
    try:
        return os.listdir(fd)
    except OSError:
        return []
    finally:
        os.close(fd)


def read_ethtool(text: str, device: str, ts: float, driver: str | None = None) -> Reading:
    """One ``ethtool -S`` output -> Reading; ``driver`` (from sysfs or ``--driver``) or else sniffed."""
    stats, problems = read_ethtool_text(text)
    if not stats:
        raise ParseError("not ethtool -S output (no 'key: count' lines)")
    guesses: list[str] = []
    if driver is None:
        driver, guesses = sniff_driver(stats)
    elif driver not in DRIVERS:
        problems.append(f"driver {driver!r} has no mapping table: every key kept as an extra")
    dmap = driver_map(driver)
    unmapped = [k for k in stats if (res := _resolve(dmap, k)) is not None and not res[3]]
    return Reading(samples=map_ethtool(stats, driver, ts, device), unmapped=unmapped, problems=problems,
                   guesses=guesses)


def _read_ethtool(path: Path, device: str, ts: float, driver: str | None = None) -> Reading:
    return read_ethtool(path.read_text(), device, ts, driver)


def _looks_like_ethtool(head: str) -> bool:
    """The header, or a paste whose first lines are all ``key: count`` with at least one key a
    mapping table knows (a grep-filtered paste has no header)."""
    if head.lstrip().startswith("NIC statistics:"):
        return True
    lines = [ln.strip() for ln in head.splitlines()[:40] if ln.strip()]
    if len(lines) < 2 or not all(ln.rpartition(":")[2].strip().isdigit() and ":" in ln for ln in lines):
        return False
    keys = [ln.rpartition(":")[0].strip() for ln in lines]
    return any(p.fullmatch(k) for k in keys for d in DRIVERS.values() for p in (*d.distinctive,
                                                                                *(r.pattern for r in d.rules)))


def _is_netdev(d: Path) -> bool:
    """An interface directory: its ``statistics/``, or (a copy that kept only the state files, as
    exporters' test trees do) its ``operstate``."""
    return (d / "statistics").is_dir() or (d / "operstate").is_file()


def _netdev_dirs(path: Path) -> list[Path]:
    """Interface directories at ``path``: one interface, ``class/net`` or a sysfs root."""
    return _netdevs_and_empty(path)[0]


def _netdevs_and_empty(path: Path) -> tuple[list[Path], list[str]]:
    """Interface directories at ``path``, and the names beside them that hold nothing to read: a
    ``class/net`` entry whose target a partial copy of /sys did not keep (a dangling link), or an empty
    directory. Regular files there (``bonding_masters``) are not interfaces."""
    if _is_netdev(path):
        return [path], []
    for base in (path, path / "net", path / "class/net"):
        entries = sorted(base.glob("*")) if base.is_dir() else []
        found = [d for d in entries if _is_netdev(d)]
        if found:
            return found, [d.name for d in entries if not _is_netdev(d) and (d.is_symlink() or d.is_dir())]
    return [], []


def _read_sysfs_net(path: Path, device: str, ts: float) -> Reading:
    out = Reading()
    found, empty = _netdevs_and_empty(path)
    if empty:
        out.problems.append(f"{len(empty)} interfaces listed with nothing behind them in this tree (a partial copy "
                            f"of /sys?), not read: {', '.join(empty)}")
    for d in found:
        files = {}
        stats = sorted((d / "statistics").iterdir()) if (d / "statistics").is_dir() else []
        if not stats:
            out.problems.append(f"{d.name}: no statistics/ (byte, packet, error counters): only its state files read")
        for f in [*stats, *(d / n for n in STATE_FILES)]:
            text = read_text(f) if f.is_file() else None
            if text is not None:
                files[str(f.relative_to(d))] = text
        out.samples.extend(parse_netdev(files, ts, f"{device}:{d.name}"))
        out.unmapped.extend(n.removeprefix("statistics/") for n in files
                            if n.startswith("statistics/") and n.removeprefix("statistics/") not in NETDEV_STATS)
    return out


FORMATS = (
    Format("sysfs-net", "sysfs interface counters (/sys/class/net/<if>/statistics and state files)",
           sniff=lambda p, _head: bool(_netdev_dirs(p)), read=_read_sysfs_net, directory=True),
    Format("ethtool-S", "`ethtool -S IFACE` NIC statistics, with or without the header (--driver names the "
           "mapping table; sniffed from keys only one driver prints when omitted)",
           sniff=lambda _p, head: _looks_like_ethtool(head), read=_read_ethtool, options=("driver",), priority=150),
)
