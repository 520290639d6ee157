"""Linux-switch collector: per-port egress queue (qdisc) statistics, nftables counters and carrier
losses of a switch that runs Linux (the lab's bridges; the same kernel objects a SONiC or Cumulus
box exposes for its software-forwarded ports).

Fetch runs ``tc -s -j qdisc show`` and ``nft -j list counters`` (both netlink underneath) and reads
``/sys/class/net/<port>/carrier_down_count``; parse is pure. What an nftables counter means is
configuration, not code: a named counter ``<kind>_<port>`` (``ecn_swp2``) counts packets of that
port, and ``COUNTER_METRICS`` says which canonical metric each kind feeds.

Samples per port (source ``switch:port``):
- ``tx_discards_total{qdisc=root}``: packets the port's root qdisc dropped (the egress queue
  overflowed or a shaper policed them). Labelled because ``ifOutDiscards`` over SNMP is a different
  counter (driver tx drops) of the same port.
- ``queue_occupancy_bytes{qdisc=root}`` (gauge) and ``queue_occupancy_packets{qdisc=root}``.
- ``qdisc_overlimits_total``, ``qdisc_requeues_total`` (extras).
- ``ecn_marked_packets_total``: CE marks by nftables rules of that port plus the ``ecn_mark``
  statistic of marking qdiscs (red, fq_codel, pie) where present.
- whatever other counter kinds ``COUNTER_METRICS`` maps, and ``link_down_total`` from sysfs.
- per egress queue (#16), where the root qdisc splits the port into queues (``mq``, ``mqprio``,
  ``prio``, ``ets``, ``multiq``, ``taprio``: class ``<root>:<n>`` is queue/band ``n - 1``), from the
  qdisc attached to that class (its numbers include whatever is nested under it), labelled
  ``{"queue": "<n - 1>"}``: ``tx_queue_bytes_total``, ``tx_queue_packets_total``,
  ``queue_dropped_packets_total``, ``queue_occupancy_bytes`` (backlog), and
  ``ecn_marked_packets_total`` summed over the marking qdiscs in that queue's subtree.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now

log = logging.getLogger(__name__)

# nftables counter kind (the name before "_<port>") -> canonical metric of that port.
COUNTER_METRICS: dict[str, str] = {
    "ecn": "ecn_marked_packets_total",  # packets a rule set CE on (ip ecn set ce)
    "fcs": "rx_fcs_errors_total",  # frames a rule discarded as corrupted on arrival (see lab README)
    "discard": "rx_discards_total",  # frames a rule discarded for policy/buffer reasons
}
# qdisc JSON statistic -> (metric, kind). Gauges are backlog, counters cumulative.
QDISC_STATS: dict[str, str] = {
    "drops": "tx_discards_total",
    "backlog": "queue_occupancy_bytes",
    "qlen": "queue_occupancy_packets",
    "overlimits": "qdisc_overlimits_total",
    "requeues": "qdisc_requeues_total",
}
ROOT = {"qdisc": "root"}
# Root qdiscs whose classes are the port's queues (bands), numbered from 1.
QUEUE_ROOTS = frozenset({"mq", "mqprio", "prio", "ets", "multiq", "taprio"})
# qdisc JSON statistic of the qdisc on a queue's class -> queue metric (label `queue`).
QUEUE_STATS: dict[str, str] = {
    "bytes": "tx_queue_bytes_total",
    "packets": "tx_queue_packets_total",
    "drops": "queue_dropped_packets_total",
    "backlog": "queue_occupancy_bytes",
}
# Where marking qdiscs count CE marks: fq_codel and pie "ecn_mark", red/choke/sfb "marked" (iproute2).
ECN_KEYS = ("ecn_mark", "marked")
# nftables-derived counters that a standard MIB also names (rx_fcs_errors_total <- EtherLike-MIB over
# SNMP) must not share a series with it: two writers of one counter would look like resets.
NFT = {"via": "nft"}


def parse_qdiscs(text: str, switch: str, ts: float,
                 ports: Sequence[str] = ("*",)) -> tuple[list[Sample], dict[str, float]]:
    """``tc -s -j qdisc show`` -> root-qdisc samples per port, and ECN marks per port from marking
    qdiscs anywhere in the port's tree. A row without a device or with bad numbers is skipped."""
    try:
        rows = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise ParseError(f"{switch}: tc -j qdisc: not JSON: {exc}") from exc
    if not isinstance(rows, list):
        raise ParseError(f"{switch}: tc -j qdisc: expected a list")
    out: list[Sample] = []
    ecn: dict[str, float] = {}
    out += _queue_samples(rows, switch, ts, ports)
    for row in rows:
        dev = row.get("dev") if isinstance(row, dict) else None
        if not isinstance(dev, str) or not _want(dev, ports):
            continue
        mark = _ecn_mark(row)
        if mark is not None:
            ecn[dev] = ecn.get(dev, 0.0) + mark
        if not row.get("root"):
            continue
        src = f"{switch}:{dev}"
        for key, metric in QDISC_STATS.items():
            v = row.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.append(Sample(ts, src, metric, float(v), ROOT))
    return out, ecn


def _ecn_mark(row: Mapping[str, Any]) -> float | None:
    # fq_codel/pie report "ecn_mark", red/choke/sfb "marked", at the top level or in "xstats"
    for holder in (row, row.get("xstats") or {}):
        for key in ECN_KEYS:
            v = holder.get(key) if isinstance(holder, Mapping) else None
            if isinstance(v, int | float) and not isinstance(v, bool):
                return float(v)
    return None


def _major(handle: object) -> str | None:
    # iproute2 prints a handle with major 0 as ":1" (the default mq root is "0:", its classes ":1"...)
    if not isinstance(handle, str) or ":" not in handle:
        return None
    return handle.split(":", 1)[0].lstrip("0") or "0"


def _queue_samples(rows: list[Any], switch: str, ts: float, ports: Sequence[str]) -> list[Sample]:
    """Per-queue samples of ports whose root qdisc splits them into queues (see the module doc)."""
    devs: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if isinstance(row, Mapping) and isinstance(row.get("dev"), str) and _want(row["dev"], ports):
            devs.setdefault(row["dev"], []).append(row)
    out: list[Sample] = []
    for dev, dev_rows in sorted(devs.items()):
        root = next((r for r in dev_rows if r.get("root")), None)
        if root is None or root.get("kind") not in QUEUE_ROOTS or _major(root.get("handle")) is None:
            continue
        by_major = {_major(r.get("handle")): r for r in dev_rows if not r.get("root")}
        queues: dict[str, Mapping[str, Any]] = {}
        marks: dict[str, float] = {}
        for r in dev_rows:
            q = _queue_of(r, _major(root.get("handle")), by_major)
            if q is None:
                continue
            if _major(r.get("parent")) == _major(root.get("handle")):
                queues[q] = r
            mark = _ecn_mark(r)
            if mark is not None:
                marks[q] = marks.get(q, 0.0) + mark
        src = f"{switch}:{dev}"
        for q, r in sorted(queues.items(), key=lambda kv: int(kv[0])):
            labels = {"queue": q}
            for key, metric in QUEUE_STATS.items():
                v = r.get(key)
                if isinstance(v, int | float) and not isinstance(v, bool):
                    out.append(Sample(ts, src, metric, float(v), labels))
            if q in marks:
                out.append(Sample(ts, src, "ecn_marked_packets_total", marks[q], labels))
    return out


def _queue_of(row: Mapping[str, Any], root: str | None, by_major: Mapping[str | None, Mapping[str, Any]],
              depth: int = 16) -> str | None:
    """The queue (class minor - 1 under the root) a qdisc sits in, walking up its parents."""
    parent = row.get("parent")
    if not isinstance(parent, str) or ":" not in parent or depth == 0:
        return None
    major, minor = _major(parent), parent.split(":", 1)[1]
    if major == root:
        try:
            n = int(minor, 16)
        except ValueError:
            return None
        return str(n - 1) if n >= 1 else None
    up = by_major.get(major)
    return None if up is None or up is row else _queue_of(up, root, by_major, depth - 1)


def parse_counters(text: str, switch: str, ts: float, ports: Sequence[str] = ("*",),
                   kinds: Mapping[str, str] = COUNTER_METRICS,
                   wire_frame_bytes: int | None = None) -> dict[tuple[str, str], float]:
    """``nft -j list counters`` -> {(port, metric): packets} for counters named ``<kind>_<port>``.

    nftables counts socket buffers. Where the fabric passes GSO super-packets (veth: up to 64 KB,
    one counted "packet" for ~40 frames on a real wire), ``wire_frame_bytes`` (the link's largest
    frame) turns a count into wire-frame equivalents: max(packets, bytes / wire_frame_bytes), a
    lower bound of the frames a switch ASIC would count. Off by default: frames are frames."""
    try:
        doc = json.loads(text or '{"nftables": []}')
    except json.JSONDecodeError as exc:
        raise ParseError(f"{switch}: nft -j: not JSON: {exc}") from exc
    out: dict[tuple[str, str], float] = {}
    for obj in doc.get("nftables", []) if isinstance(doc, dict) else []:
        c = obj.get("counter") if isinstance(obj, dict) else None
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            continue
        kind, _, port = c["name"].partition("_")
        metric = kinds.get(kind)
        packets, nbytes = c.get("packets"), c.get("bytes")
        if metric is None or not port or not _want(port, ports) or not isinstance(packets, int):
            continue
        frames = float(packets)
        if wire_frame_bytes and isinstance(nbytes, int):
            frames = max(frames, float(nbytes // wire_frame_bytes))
        out[(port, metric)] = out.get((port, metric), 0.0) + frames
    return out


def merge(switch: str, ts: float, qdisc: list[Sample], qdisc_ecn: Mapping[str, float],
          counters: Mapping[tuple[str, str], float], carrier_downs: Mapping[str, float]) -> list[Sample]:
    """All samples of one poll. ECN marks sum rule counters and marking qdiscs of the same port."""
    out = list(qdisc)
    ecn = dict(qdisc_ecn)
    for (port, metric), v in counters.items():
        if metric == "ecn_marked_packets_total":
            ecn[port] = ecn.get(port, 0.0) + v
        else:
            out.append(Sample(ts, f"{switch}:{port}", metric, v, NFT))
    out += [Sample(ts, f"{switch}:{p}", "ecn_marked_packets_total", v) for p, v in sorted(ecn.items())]
    out += [Sample(ts, f"{switch}:{p}", "link_down_total", v) for p, v in sorted(carrier_downs.items())]
    return out


def _want(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


class LinuxSwitchCollector:
    """One Linux switch, polled from inside its network namespace (or on the box itself)."""

    def __init__(self, switch: str, *, ports: Sequence[str] = ("*",), sys_root: Path = Path("/sys"),
                 tc: str = "tc", nft: str = "nft", kinds: Mapping[str, str] = COUNTER_METRICS,
                 wire_frame_bytes: int | None = None) -> None:
        self.switch, self.ports, self.sys_root, self.tc, self.nft, self.kinds = switch, ports, sys_root, tc, nft, kinds
        self.wire_frame_bytes = wire_frame_bytes
        self.name = f"{switch}/linux"

    def _run(self, *cmd: str) -> str:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CollectionError(f"{self.switch}: {' '.join(cmd)}: {exc}") from exc
        if r.returncode:
            raise CollectionError(f"{self.switch}: {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[:200]}")
        return r.stdout

    def _carrier_downs(self) -> dict[str, float]:
        out = {}
        base = self.sys_root / "class" / "net"
        for d in sorted(base.iterdir()) if base.exists() else []:
            if not _want(d.name, self.ports):
                continue
            try:
                out[d.name] = float(int((d / "carrier_down_count").read_text().strip()))
            except (OSError, ValueError):
                continue
        return out

    def poll(self) -> list[Sample]:
        ts = now()
        try:
            qdisc, qecn = parse_qdiscs(self._run(self.tc, "-s", "-j", "qdisc", "show"), self.switch, ts, self.ports)
        except (CollectionError, ParseError) as exc:
            log.warning("%s: qdisc statistics skipped: %s", self.switch, exc)
            qdisc, qecn = [], {}
        try:
            counters = parse_counters(self._run(self.nft, "-j", "list", "counters"), self.switch, ts, self.ports,
                                      self.kinds, self.wire_frame_bytes)
        except (CollectionError, ParseError) as exc:
            log.warning("%s: nftables counters skipped: %s", self.switch, exc)
            counters = {}
        return merge(self.switch, ts, qdisc, qecn, counters, self._carrier_downs())
