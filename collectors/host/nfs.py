"""NFS client mounts from ``/proc/self/mountstats``: bytes, per-op statistics, the RPC transport (``xprt:``)
lines, and what a mount's block holds that is not read (said, never dropped in silence: issue #43).

Field layouts are the kernel's print functions: ``xs_tcp_print_stats``, ``xs_udp_print_stats`` and
``xs_local_print_stats`` (net/sunrpc/xprtsock.c), ``xprt_rdma_print_stats`` (net/sunrpc/xprtrdma/transport.c).
Older kernels print fewer trailing fields (statvers 1.0 has no ``max_slots``/``sending_u``/``pending_u``); a
mount with ``nconnect=N`` prints N lines, whose counts are summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fabricscope.core.model import Sample

_COMMON = ("bind_count", "connect_count", "connect_time", "idle_time", "sends", "recvs", "bad_xids", "req_u",
           "bklog_u")
_SLOTS = ("max_slots", "sending_u", "pending_u")
XPRT_FIELDS: dict[str, tuple[str, ...]] = {
    "tcp": ("srcport", *_COMMON, *_SLOTS),
    "local": (*_COMMON, *_SLOTS),
    "udp": ("srcport", "bind_count", "sends", "recvs", "bad_xids", "req_u", "bklog_u", *_SLOTS),
    "rdma": ("srcport", *_COMMON, "read_chunk_count", "write_chunk_count", "reply_chunk_count",
             "total_rdma_request", "total_rdma_reply", "pullup_copy_count", "fixup_copy_count",
             "hardway_register_count", "failed_marshal_count", "bad_reply_count", "nomsg_call_count",
             "mrs_recycled", "mrs_orphaned", "mrs_allocated", "local_inv_needed", "empty_sendctx_q",
             "reply_waits_for_send"),
}
# The transport's counts that say something about the path to the server: reconnects (a flapping link or
# server), RPCs sent and answered, replies matching no request (bad xids: late replies after a retransmit),
# and the backlog (the sum, over sends, of requests waiting for a slot: divided by sends, the mean backlog).
XPRT_METRICS = {
    "connect_count": "nfs_transport_connects_total",
    "sends": "nfs_rpc_sends_total",
    "recvs": "nfs_rpc_receives_total",
    "bad_xids": "nfs_rpc_bad_xids_total",
    "bklog_u": "nfs_rpc_backlog_queue_total",
}
# Lines of a mount's block that are its settings, not counts: nothing in them to read as a sample.
SETTINGS_LINES = frozenset({"opts", "caps", "sec", "nfsv4", "impl_id"})


@dataclass
class Unread:
    """What one mount's block held that no sample carries: per line kind, how many lines and values."""

    lines: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)
    xprt_fields: dict[str, set[str]] = field(default_factory=dict)  # protocol -> field names not mapped
    xprt_lines: dict[str, int] = field(default_factory=dict)  # protocol -> lines read

    def add(self, kind: str, n_values: int) -> None:
        self.lines[kind] = self.lines.get(kind, 0) + 1
        self.values[kind] = self.values.get(kind, 0) + n_values


def read_xprt(values: Sequence[str], totals: dict[str, float], unread: Unread) -> None:
    """One ``xprt:`` line (its words after the key) into ``totals`` (field -> summed count); the fields it
    does not map, or an unknown protocol or a value that is not a count, into ``unread``."""
    proto, raw = (values[0], values[1:]) if values else ("?", [])
    names = XPRT_FIELDS.get(proto)
    if names is None or not all(v.lstrip("-").isdigit() for v in raw):
        unread.add(f"xprt {proto}", len(raw))
        return
    skipped = unread.xprt_fields.setdefault(proto, set())
    skipped |= {n for n, _ in zip(names, raw, strict=False) if n not in XPRT_METRICS}
    if len(raw) > len(names):
        skipped.add(f"{len(raw) - len(names)} fields after {names[-1]}")
    unread.xprt_lines[proto] = unread.xprt_lines.get(proto, 0) + 1
    for name, value in zip(names, raw, strict=False):
        if name in XPRT_METRICS:
            totals[name] = totals.get(name, 0.0) + float(value)


def unread_problems(where: str, unread: Unread) -> list[str]:
    """One problem line per line kind of one mount: how many lines and values were not read."""
    out = []
    for proto, skipped in sorted(unread.xprt_fields.items()):
        order = XPRT_FIELDS[proto]
        names = sorted(skipped, key=lambda n: order.index(n) if n in order else len(order))
        lines = _count(unread.xprt_lines[proto], "line")
        out.append(f"{where}: xprt {proto} ({lines}): {len(names)} fields not mapped ({', '.join(names)}); "
                   f"read: {', '.join(k for k in XPRT_METRICS if k in order)}")
    for kind, n in sorted(unread.lines.items()):
        what = {"age": "the seconds since mount, no canonical metric",
                "events": "the NFS client's VFS, cache and page event counters, no canonical metric",
                "per-op": "op lines whose fields are not all counts"}.get(kind, "a line kind this reader does not know")
        out.append(f"{where}: {kind}: {_count(n, 'line')} ({_count(unread.values.get(kind, 0), 'value')}) not read: "
                   f"{what}")
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# NFS per-op fields (include/linux/sunrpc/metrics.h), the ninth (errors) since Linux 5.3.
NFS_OP_FIELDS = ("ops", "trans", "timeouts", "bytes_sent", "bytes_recv", "queue_ms", "rtt_ms", "execute_ms",
                 "errors")
NFS_BYTES_FIELDS = ("normalreadbytes", "normalwritebytes", "directreadbytes", "directwritebytes",
                    "serverreadbytes", "serverwritebytes", "readpages", "writepages")
NFS_FSTYPES = frozenset({"nfs", "nfs4"})


@dataclass
class NfsMount:
    device: str
    mountpoint: str
    fstype: str
    bytes: dict[str, float] = field(default_factory=dict)
    ops: dict[str, dict[str, float]] = field(default_factory=dict)
    xprt: dict[str, float] = field(default_factory=dict)  # transport field -> count, summed over its lines
    unread: Unread = field(default_factory=Unread)

    def problems(self) -> list[str]:
        return unread_problems(f"{self.device} on {self.mountpoint}", self.unread)


def parse_mountstats(text: str) -> list[NfsMount]:
    """``/proc/self/mountstats`` -> NFS mounts with byte counters and per-op statistics."""
    mounts: list[NfsMount] = []
    current: NfsMount | None = None
    in_ops = False
    for line in text.splitlines():
        if line.startswith("device "):
            parts = line.split()
            in_ops = False
            # device DEV mounted on MOUNTPOINT with fstype TYPE [statvers=X]
            if len(parts) >= 8 and parts[2:4] == ["mounted", "on"] and "fstype" in parts[5:-1]:
                fstype = parts[parts.index("fstype", 5) + 1]
                current = NfsMount(parts[1], parts[4], fstype) if fstype in NFS_FSTYPES else None
                if current is not None:
                    mounts.append(current)
            else:
                current = None
            continue
        if current is None:
            continue
        in_ops = _mount_line(current, line.strip(), in_ops)
    return mounts


def _mount_line(mount: NfsMount, stripped: str, in_ops: bool) -> bool:
    """One line of a mount's block into ``mount``; whether the per-op table has begun."""
    key, _, rest = stripped.partition(":")
    values = rest.split()
    if key == "bytes":
        pairs = zip(NFS_BYTES_FIELDS, values, strict=False)
        mount.bytes = {k: float(v) for k, v in pairs if v.isdigit()}
    elif key == "xprt":
        read_xprt(values, mount.xprt, mount.unread)
    elif stripped == "per-op statistics":
        return True
    elif in_ops and values and all(v.isdigit() for v in values):
        mount.ops[key] = {k: float(v) for k, v in zip(NFS_OP_FIELDS, values, strict=False)}
    elif stripped and key not in SETTINGS_LINES and not stripped.startswith("RPC iostats version"):
        mount.unread.add("per-op" if in_ops else key, len(values))
    return in_ops


def visible_mounts(mounts: list[NfsMount]) -> tuple[list[NfsMount], list[str]]:
    """One mount per mountpoint: the last listed. A mountpoint listed again is an over-mount (or a second
    mount of the same path): the later entry is the one the path reaches, and the earlier ones' counters
    would land in the same series (source = the mountpoint). They are skipped and said, never merged."""
    last = {m.mountpoint: i for i, m in enumerate(mounts)}
    kept = [m for i, m in enumerate(mounts) if last[m.mountpoint] == i]
    problems = [f"{m.device} ({m.fstype}) on {m.mountpoint} is listed again later (over-mounted): its counters "
                "skipped, the later mount read" for i, m in enumerate(mounts) if last[m.mountpoint] != i]
    return kept, problems


def nfs_samples(mount: NfsMount, ts: float, source: str) -> list[Sample]:
    out: list[Sample] = []
    if "serverreadbytes" in mount.bytes:
        out.append(Sample(ts, source, "read_bytes_total", mount.bytes["serverreadbytes"]))
    if "serverwritebytes" in mount.bytes:
        out.append(Sample(ts, source, "write_bytes_total", mount.bytes["serverwritebytes"]))
    for op, canonical in (("READ", "read_ops_total"), ("WRITE", "write_ops_total")):
        if op in mount.ops:
            out.append(Sample(ts, source, canonical, mount.ops[op]["ops"]))
    for op, f in mount.ops.items():
        if not f.get("ops"):
            continue  # the ~60 NFSv4 ops never used on this mount: nothing to store
        lab = {"op": op}
        out.append(Sample(ts, source, "nfs_ops_total", f["ops"], lab))
        out.append(Sample(ts, source, "nfs_retransmits_total", max(f["trans"] - f["ops"], 0.0), lab))
        out.append(Sample(ts, source, "nfs_timeouts_total", f["timeouts"], lab))
        out.append(Sample(ts, source, "nfs_rtt_seconds_total", f["rtt_ms"] / 1e3, lab))
        out.append(Sample(ts, source, "nfs_execute_seconds_total", f["execute_ms"] / 1e3, lab))
        if "errors" in f:
            out.append(Sample(ts, source, "nfs_errors_total", f["errors"], lab))
    out.extend(Sample(ts, source, XPRT_METRICS[k], v) for k, v in mount.xprt.items())
    return out
