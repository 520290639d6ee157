"""Pure SNMP parse: varbinds ``(numeric OID, value)`` → samples named ``device:ifName``.

Values arrive already unwrapped from pysnmp (``int`` for INTEGER/Counter/Gauge/TimeTicks, ``bytes``
for OCTET STRING). A varbind that does not fit its column (a counter that is a string, an index that
is not a number) is reported in ``problems`` and skipped; the rest of the poll is kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fabricscope.core.model import Sample
from fabricscope.core.values import U64_MAX, counter

from . import oids
from .oids import Column

Value = int | bytes | str

_WRAP32_SATURATED = 4294967295  # ifSpeed reports this when the real speed does not fit


@dataclass
class SnmpPoll:
    """What one poll says: samples plus what reset detection needs."""

    samples: list[Sample] = field(default_factory=list)
    uptime_ticks: int | None = None
    # source → (ifIndex, ifCounterDiscontinuityTime or None): either changing means a reset
    counter_epoch: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    if_names: dict[int, str] = field(default_factory=dict)


def text(value: Value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00").strip()
    return str(value).strip()


def _column_index(oid: str, table: Mapping[str, Column]) -> tuple[Column, list[str]] | None:
    """Split an instance OID into its column and index components (1 to 3, per the column's layout)."""
    head, idx = oid, list[str]()
    for n in range(1, 4):
        head, _, last = head.rpartition(".")
        idx.insert(0, last)
        col = table.get(head)
        if col is not None and oids.INDEXES[col.index][0] == n:
            return col, idx
    return None


def _value(col: Column, raw: Value) -> float | None:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise TypeError(f"expected a number, got {type(raw).__name__}")
    counter(raw)  # validates: no SNMP counter or gauge we read is negative or past 64 bits
    if col.transform == "oper_up":
        return 1.0 if raw == 1 else 0.0  # ifOperStatus up(1); everything else is not forwarding
    if col.transform == "speed32" and raw >= _WRAP32_SATURATED:
        return None  # saturated: the real speed is unknown here, leave it absent
    return raw * col.scale


def _interface_names(names: Mapping[int, str], descr: Mapping[int, str]) -> tuple[dict[int, str], list[str]]:
    """ifIndex → the name its samples go under: ifName, else ifDescr. A name that two or more ifIndexes
    carry (a device reusing a port label across line cards, an anonymised walk) cannot name a source on
    its own: their series would collide and a store would keep one at random. Each such interface is
    named ``<name>#<ifIndex>`` and the name is one problem line."""
    plain = {i: n for i in {*names, *descr} if (n := names.get(i) or descr.get(i))}
    by_name: dict[str, list[int]] = defaultdict(list)
    for if_index, name in plain.items():
        by_name[name].append(if_index)
    problems: list[str] = []
    for name, indexes in sorted(by_name.items()):
        if len(indexes) > 1:
            indexes.sort()
            for if_index in indexes:
                plain[if_index] = f"{name}#{if_index}"
            problems.append(f"interface name {name!r} is carried by ifIndex {', '.join(map(str, indexes))}: "
                            f"their samples named {name}#<ifIndex>")
    return plain, problems


def _check_speeds(parts: Mapping[tuple, list[float]], best: dict[tuple, tuple[int, float]]) -> list[str]:
    """ifHighSpeed (Mb/s) against ifSpeed (b/s, exact below its 2**32 - 1 ceiling, where it saturates and is left
    absent): where both are there and disagree, the device misreports one of them (a SCALANCE switch puts b/s into
    ifHighSpeed: 10 Mb/s ports read as 10 Tb/s). ifSpeed, exact, is kept; the disagreement is one problem line."""
    off: list[tuple[int, float, float]] = []
    for (if_index, metric, labels), (rank, high) in best.items():
        exact = parts.get((if_index, metric, labels, labels, 1)) if metric == "speed_bps" and rank == 0 else None
        if exact and exact[0] > 0 and round(high / 1e6) != round(exact[0] / 1e6):
            best[(if_index, metric, labels)] = (1, exact[0])
            off.append((if_index, high, exact[0]))
    if not off:
        return []
    i, high, low = off[0]
    return [f"ifHighSpeed disagrees with ifSpeed on ifIndex {', '.join(str(o[0]) for o in off)} (ifIndex {i}: "
            f"ifHighSpeed {high / 1e6:.0f} Mb/s, ifSpeed {low:.0f} b/s): ifSpeed kept, exact below 4.29 Gb/s"]


def parse(
    device: str,
    varbinds: Iterable[tuple[str, Value]],
    ts: float,
    columns: Iterable[Column] = oids.STANDARD,
    wants: object = None,
) -> SnmpPoll:
    """Map one poll's varbinds to samples. ``wants`` is an optional ``ifName -> bool`` filter."""
    table = {c.oid: c for c in columns}
    out = SnmpPoll()
    names: dict[int, str] = {}
    descr: dict[int, str] = {}
    disc: dict[int, int] = {}
    # (ifIndex, metric, labels, column labels, rank) → part values; parts of one rank are summed
    Key = tuple[int, str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], int]
    parts: dict[Key, list[float]] = defaultdict(list)
    summed: dict[tuple[Key, str], float] = {}  # (key, column) → sum over the summed index component
    ncols: dict[tuple[str, tuple[tuple[str, str], ...], int], int] = defaultdict(int)
    for c in table.values():
        ncols[(c.metric, c.labels, c.rank)] += 1

    for oid, raw in varbinds:
        if oid[:1] == ".":
            oid = oid[1:]
        head, _, last = oid.rpartition(".")
        col = table.get(head)
        try:
            if col is not None and col.index == "if":  # the bulk of a poll: one ifIndex-indexed counter
                value = (raw * col.scale if col.transform is None and type(raw) is int and 0 <= raw <= U64_MAX
                         else _value(col, raw))
                if value is not None:
                    parts[(int(last), col.metric, col.labels, col.labels, col.rank)].append(value)
                continue
            if oid == oids.SYS_UPTIME:
                out.uptime_ticks = int(raw)
                continue
            if head == oids.IF_NAME:
                names[int(last)] = text(raw)
                continue
            if head == oids.IF_DESCR:
                descr[int(last)] = text(raw)
                continue
            if head == oids.IF_COUNTER_DISCONTINUITY:
                disc[int(last)] = int(raw)
                continue
            hit = _column_index(oid, table)
            if hit is None:
                continue
            col, idx = hit
            value = _value(col, raw)
            if value is None:
                continue
            if_index, label = int(idx[0]), oids.INDEXES[col.index][1]
            labels = (*col.labels, (label, str(int(idx[1])))) if label else col.labels
            part = (if_index, col.metric, labels, col.labels, col.rank)
            if len(idx) == 3:  # rows differing only in the last component add up to one part
                _ = int(idx[2])  # validates: a non-numeric component is a malformed varbind
                summed[(part, col.oid)] = summed.get((part, col.oid), 0.0) + value
            else:
                parts[part].append(value)
        except (TypeError, ValueError) as exc:
            out.problems.append(f"{oid}: {exc}")  # the scheduler logs it with the device

    for (part, _), total in summed.items():
        parts[part].append(total)
    out.if_names, shared = _interface_names(names, descr)
    out.problems.extend(shared)
    best: dict[tuple[int, str, tuple[tuple[str, str], ...]], tuple[int, float]] = {}
    for (if_index, metric, labels, col_labels, rank), values in parts.items():
        if len(values) != ncols[(metric, col_labels, rank)]:
            continue  # a summed metric with a missing part would under-count: leave it absent
        key = (if_index, metric, labels)
        if key not in best or rank < best[key][0]:
            best[key] = (rank, float(sum(values)))

    out.problems.extend(_check_speeds(parts, best))
    wanted: dict[str, bool] = {}
    for (if_index, metric, labels), (_, value) in sorted(best.items()):
        name = out.if_names.get(if_index)
        if not name:
            out.problems.append(f"ifIndex {if_index}: no ifName/ifDescr, samples skipped")
            continue
        if name not in wanted:  # the include/exclude globs once per interface, not per sample
            wanted[name] = not callable(wants) or bool(wants(name))
        if not wanted[name]:
            continue
        source = f"{device}:{name}"
        out.samples.append(Sample(ts, source, metric, value, dict(labels) if labels else None))
        out.counter_epoch.setdefault(source, (if_index, disc.get(if_index)))
    # the same "no name" complaint once per ifIndex is enough
    out.problems = list(dict.fromkeys(out.problems))
    return out
