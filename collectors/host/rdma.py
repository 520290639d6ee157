"""RDMA/InfiniBand collector: ``/sys/class/infiniband/<dev>/ports/<n>/{counters,hw_counters}``.

The same counters are also printed by ``rdma statistic show link`` (hw_counters) and
``perfquery -x`` (IB PMA port counters); both have pure parsers here that produce the sysfs
counter names, so one mapping table serves all three inputs.

Sources are ``host:mlx5_0`` for port 1 and ``host:mlx5_0/2`` for other ports (RoCE functions
have one port each; the ``/N`` suffix is the ``rdma`` tool's own link naming).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.common import extra_counter, read_text, select
from fabricscope.collectors.host.ib_port import non_counts, port_state, unread_device_dirs, unread_ext
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now
from fabricscope.core.values import counter

log = logging.getLogger(__name__)

# sysfs counter name -> (canonical metric, scale). PortXmitData/PortRcvData count 4-octet words.
IB_COUNTERS: dict[str, tuple[str, float]] = {
    "port_xmit_data": ("tx_bytes_total", 4.0),
    "port_rcv_data": ("rx_bytes_total", 4.0),
    "port_xmit_packets": ("tx_packets_total", 1.0),
    "port_rcv_packets": ("rx_packets_total", 1.0),
    "symbol_error": ("symbol_errors_total", 1.0),
    "link_downed": ("link_down_total", 1.0),
    "port_rcv_errors": ("rx_errors_total", 1.0),
    "port_xmit_discards": ("tx_discards_total", 1.0),
    "port_xmit_wait": ("port_xmit_wait_total", 1.0),
    "link_error_recovery": ("link_error_recovery_total", 1.0),
}
RDMA_HW_COUNTERS: dict[str, tuple[str, float]] = {
    "np_cnp_sent": ("cnp_sent_total", 1.0),
    "rp_cnp_handled": ("cnp_handled_total", 1.0),
    "np_ecn_marked_roce_packets": ("ecn_marked_packets_total", 1.0),
    "out_of_sequence": ("rdma_retransmits_total", 1.0),
    "local_ack_timeout_err": ("rdma_timeouts_total", 1.0),
    "out_of_buffer": ("rx_out_of_buffer_total", 1.0),
}
# ``counters_ext/`` (the mlx4 OFED driver's 64-bit PortCountersExtended beside the 32-bit ``counters/``):
# name there -> the ``counters/`` name it extends. The 32-bit PMA counters stop at 2**32 - 1 (they saturate,
# not wrap), so the true count is never below either reading: the larger one is kept.
COUNTERS_EXT: dict[str, str] = {
    "port_xmit_data_64": "port_xmit_data",
    "port_rcv_data_64": "port_rcv_data",
    "port_xmit_packets_64": "port_xmit_packets",
    "port_rcv_packets_64": "port_rcv_packets",
    "port_unicast_xmit_packets": "unicast_xmit_packets",
    "port_unicast_rcv_packets": "unicast_rcv_packets",
    "port_multicast_xmit_packets": "multicast_xmit_packets",
    "port_multicast_rcv_packets": "multicast_rcv_packets",
}
# PortCounters field widths (IBA 16.1.3.5): each counter stops at 2**width - 1 instead of wrapping.
PMA_WIDTH: dict[str, int] = {
    "symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16, "port_xmit_data": 32, "port_rcv_data": 32,
    "port_xmit_packets": 32, "port_rcv_packets": 32, "port_xmit_wait": 32,
}
# hw_counters entries that are settings, not counters (lifespan: the cache time in ms).
NOT_COUNTERS = frozenset({"lifespan"})

# perfquery field -> sysfs counter name (the kernel names them after the same PMA attributes).
PERFQUERY_NAMES: dict[str, str] = {
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
}
# Older infiniband-diags (OFED 1.x, before the IBA names) print short names: a table row each, read
# the same. Their XmtData/RcvData are the same 4-octet-word counters as PortXmitData/PortRcvData.
PERFQUERY_NAMES.update({
    "XmtData": "port_xmit_data",
    "RcvData": "port_rcv_data",
    "XmtPkts": "port_xmit_packets",
    "RcvPkts": "port_rcv_packets",
    "SymbolErrors": "symbol_error",
    "LinkRecovers": "link_error_recovery",
    "LinkDowned": "link_downed",
    "RcvErrors": "port_rcv_errors",
    "RcvRemotePhysErrors": "port_rcv_remote_physical_errors",
    "RcvSwRelayErrors": "port_rcv_switch_relay_errors",
    "XmtDiscards": "port_xmit_discards",
    "XmtConstraintErrors": "port_xmit_constraint_errors",
    "RcvConstraintErrors": "port_rcv_constraint_errors",
    "LinkIntegrityErrors": "local_link_integrity_errors",
    "ExcBufOverrunErrors": "excessive_buffer_overrun_errors",
    "XmtWait": "port_xmit_wait",
})
PERFQUERY_SKIP = frozenset({"PortSelect", "CounterSelect", "CounterSelect2"})

# the header, with or without its "#": a paste rendered as Markdown or HTML (a mail archive, a README) loses
# the "#" of "# Port counters: ..." as a heading mark, and the rest of the line still says what it is
_PERFQUERY_HEADER = re.compile(r"(?:#.*|\s*Port (?:extended )?counters:.*)\bport (\d+)")
_PERFQUERY_LINE = re.compile(r"(\w+):\.*(\S+)$")
_RDMA_LINK = re.compile(r"link (\S+)/(\d+)")


def ib_source(host: str, device: str, port: int) -> str:
    return f"{host}:{device}" if port == 1 else f"{host}:{device}/{port}"


def map_port(counters: Mapping[str, float], hw_counters: Mapping[str, float], ts: float,
             source: str) -> list[Sample]:
    """Port ``counters`` and ``hw_counters`` (sysfs names) -> canonical samples + extras."""
    out: list[Sample] = []
    for table, prefix, values in ((IB_COUNTERS, "ib", counters), (RDMA_HW_COUNTERS, "rdma", hw_counters)):
        for name, value in values.items():
            if name in NOT_COUNTERS:
                continue
            metric, scale = table.get(name, (extra_counter(prefix, name), 1.0))
            out.append(Sample(ts, source, metric, value * scale))
    return out


def parse_perfquery(text: str) -> dict[int, dict[str, float]]:
    """``perfquery -x`` / ``-E`` output (one or more ports) -> {port: {sysfs counter: value}}."""
    ports: dict[int, dict[str, float]] = {}
    current: dict[str, float] | None = None
    for line in text.splitlines():
        header = _PERFQUERY_HEADER.match(line)
        if header:
            current = ports.setdefault(int(header.group(1)), {})
            continue
        m = _PERFQUERY_LINE.match(line.strip())
        if not m or current is None or m.group(1) in PERFQUERY_SKIP:
            continue
        try:
            value = counter(int(m.group(2), 0))  # PMA counters are at most 64 bits: more is a bad value
        except ValueError:
            continue  # the format reader names it (infiniband/formats.py); the agent counts it absent
        current[PERFQUERY_NAMES.get(m.group(1)) or m.group(1)] = value
    if not ports:
        raise ParseError("no '# Port counters: Lid L port N' header: not perfquery output")
    return ports


def parse_rdma_statistic(text: str) -> dict[tuple[str, int], dict[str, float]]:
    """``rdma statistic show link`` -> {(device, port): {hw counter: value}}.

    The tool prints ``link DEV/PORT name value name value ...`` and wraps long lines; pairs are
    read as a token stream, so wrapping does not matter. ``Optional-set:`` counters are included.
    """
    out: dict[tuple[str, int], dict[str, float]] = {}
    tokens = [t for line in text.splitlines() if not line.lstrip().startswith("$") for t in line.split()]
    current: dict[str, float] | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "link" and i + 1 < len(tokens) and (m := _RDMA_LINK.fullmatch(f"link {tokens[i + 1]}")):
            current = out.setdefault((m.group(1), int(m.group(2))), {})
            i += 2
            continue
        if tok.endswith(":") or current is None or i + 1 >= len(tokens):  # "Optional-set:" marker
            i += 1
            continue
        try:
            current[tok] = float(int(tokens[i + 1]))
            i += 2
        except ValueError:
            i += 1
    if not out:
        raise ParseError("no 'link DEV/PORT' record: not rdma statistic output")
    return out


def port_counters(port_dir: Path, where: str) -> tuple[dict[str, float], list[str]]:
    """A port's ``counters/``, with the 64-bit ``counters_ext/`` values where the driver prints them (the
    larger reading of each pair), and what a reader must be told: an extended counter below its 32-bit
    twin (not kept by this device?), and a PMA counter stuck at its width's maximum (saturated: a floor, and a
    rate from it is 0 while events go on)."""
    counters = _read_counter_dir(port_dir / "counters")
    problems: list[str] = []
    for ext_name, value in _read_counter_dir(port_dir / "counters_ext").items():
        name = COUNTERS_EXT.get(ext_name)
        if name is None:
            continue
        if name in counters and value < counters[name]:
            problems.append(f"{where}: counters_ext/{ext_name} {value:.0f} is below counters/{name} "
                            f"{counters[name]:.0f}; the larger kept")
        counters[name] = max(value, counters.get(name, 0.0))
    problems += [f"{where}: counters/{name} is at {value:.0f} = 2**{PMA_WIDTH[name]} - 1 (a saturated PMA counter: "
                 "a floor, not the count)" for name, value in sorted(counters.items())
                 if name in PMA_WIDTH and value == 2 ** PMA_WIDTH[name] - 1]
    return counters, problems


def _read_counter_dir(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        names = os.listdir(path)
    except OSError:
        return out
    for name in names:
        text = read_text(path / name)
        if text is None:
            continue
        try:
            out[name] = float(int(text))
        except ValueError:
            continue  # not a plain counter file (e.g. a subdirectory): skip
    return out


class RdmaCollector:
    """Every port of every RDMA device under ``<sys_root>/class/infiniband``."""

    name = "rdma"

    def __init__(self, host: str, *, sys_root: Path = Path("/sys"), include: Sequence[str] = (),
                 exclude: Sequence[str] = ()) -> None:
        self.host, self.sys_root, self.include, self.exclude = host, sys_root, include, exclude

    def ports(self) -> list[tuple[str, int]]:
        base = self.sys_root / "class/infiniband"
        if not base.exists():
            return []  # no RDMA hardware: nothing to collect, not an error
        try:
            devices = select(os.listdir(base), self.include, self.exclude)
            return [(d, int(p)) for d in devices
                    for p in sorted(os.listdir(base / d / "ports")) if p.isdigit()]
        except OSError as exc:
            raise CollectionError(f"cannot list {base}: {exc}") from exc

    def fetch(self, device: str, port: int) -> tuple[dict[str, float], dict[str, float]]:
        base = self.sys_root / "class/infiniband" / device / "ports" / str(port)
        counters, problems = port_counters(base, f"{device}/{port}")
        if problems:
            report_problems(self.host, "sysfs-infiniband", problems, log)
        return counters, _read_counter_dir(base / "hw_counters")

    def poll(self) -> list[Sample]:
        out: list[Sample] = []
        for device, port in self.ports():
            ts = now()
            counters, hw = self.fetch(device, port)
            if not counters and not hw:
                log.warning("rdma %s:%s/%d: no readable counters, skipped", self.host, device, port)
                continue
            out.extend(map_port(counters, hw, ts, ib_source(self.host, device, port)))
            base = self.sys_root / "class/infiniband" / device / "ports" / str(port)
            state, problems = port_state(base, ts, ib_source(self.host, device, port), f"{device}/{port}")
            report_problems(self.host, "sysfs-infiniband", problems, log)
            out.extend(state)
        return out


def _read_rdma_statistic(path: Path, device: str, ts: float) -> Reading:
    ports = parse_rdma_statistic(path.read_text())
    return Reading(samples=[s for (dev, port), hw in ports.items()
                            for s in map_port({}, hw, ts, ib_source(device, dev, port))],
                   unmapped=[k for hw in ports.values() for k in hw if k not in RDMA_HW_COUNTERS])


def _port_dirs(path: Path) -> list[tuple[str, int, Path]]:
    """(device, port, dir) of every ``<dev>/ports/<n>`` with counters under ``path`` (a sysfs root,
    ``class/infiniband``, one device or one port directory)."""
    found = []
    for counters in sorted(path.glob("**/ports/*/counters"))[:4096] or (
            [path / "counters"] if (path / "counters").is_dir() else []):
        port_dir = counters.parent
        if port_dir.name.isdigit() and port_dir.parent.name == "ports":
            found.append((port_dir.parent.parent.name, int(port_dir.name), port_dir))
        elif port_dir == path and path.name.isdigit():
            found.append((path.parent.parent.name or "dev", int(path.name), path))
    return found


def _devices_without_ports(path: Path, read: set[str]) -> list[str]:
    """Names ``class/infiniband`` lists (at ``path`` a sysfs root or that directory) that no port was read for:
    a device whose target a partial copy of /sys did not keep, or one without ``ports/<n>/counters``."""
    base = path if path.name == "infiniband" else path / "class" / "infiniband"
    entries = sorted(base.iterdir()) if base.is_dir() else []
    return [e.name for e in entries if e.name not in read and (e.is_symlink() or e.is_dir())]


def _read_sysfs_ib(path: Path, device: str, ts: float) -> Reading:
    out = Reading()
    ports = _port_dirs(path)
    unread = _devices_without_ports(path, {dev for dev, _, _ in ports})
    if unread:
        out.problems.append(f"{len(unread)} RDMA devices listed with no ports/<n>/counters in this tree (a partial "
                            f"copy of /sys?), not read: {', '.join(unread)}")
    for dev, port, d in ports:
        (counters, problems), hw = port_counters(d, f"{dev}/{port}"), _read_counter_dir(d / "hw_counters")
        state, state_problems = port_state(d, ts, ib_source(device, dev, port), f"{dev}/{port}")
        out.samples.extend(state)  # a port without a PMA (iWARP) still has a state and a rate
        out.problems.extend(state_problems)
        if not counters and not hw:
            out.problems.append(f"{dev}/{port}: no readable counters")
            continue
        out.problems.extend(problems)
        skipped = non_counts(d, set(counters) | set(hw))
        if skipped:
            out.problems.append(f"{dev}/{port}: {len(skipped)} files not a count, not read: {', '.join(skipped[:4])}"
                                f"{', ...' if len(skipped) > 4 else ''}")
        out.samples.extend(map_port(counters, hw, ts, ib_source(device, dev, port)))
        out.unmapped.extend(k for k in counters if k not in IB_COUNTERS)
        out.unmapped.extend(unread_ext(d, set(COUNTERS_EXT)))
        out.unmapped.extend(k for k in hw if k not in RDMA_HW_COUNTERS and k not in NOT_COUNTERS)
    # per device, not per port: ``<dev>/ports/<n>`` -> ``<dev>``
    dev_dirs = {dev: d.parent.parent for dev, _, d in ports if d.parent.name == "ports"}
    out.problems.extend(p for dev, dd in sorted(dev_dirs.items()) for p in unread_device_dirs(dd, dev))
    return out


FORMATS = (
    Format("rdma-statistic", "`rdma statistic show link` (RDMA hw counters per link: CNPs, ECN, out-of-sequence)",
           sniff=lambda _p, head: any(_RDMA_LINK.match(line) for line in head.splitlines()[:4]),
           read=_read_rdma_statistic),
    Format("sysfs-infiniband", "sysfs RDMA/IB counters (/sys/class/infiniband/<dev>/ports/<n>/counters, hw_counters)",
           sniff=lambda p, _head: bool(_port_dirs(p)), read=_read_sysfs_ib, directory=True),
)
