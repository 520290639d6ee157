"""The RPC transport (``xprt:``) lines of ``/proc/self/mountstats``, and what a mount's block holds that is
not read (said, never dropped in silence: issue #43).

Field layouts are the kernel's print functions: ``xs_tcp_print_stats``, ``xs_udp_print_stats`` and
``xs_local_print_stats`` (net/sunrpc/xprtsock.c), ``xprt_rdma_print_stats`` (net/sunrpc/xprtrdma/transport.c).
Older kernels print fewer trailing fields (statvers 1.0 has no ``max_slots``/``sending_u``/``pending_u``); a
mount with ``nconnect=N`` prints N lines, whose counts are summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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
