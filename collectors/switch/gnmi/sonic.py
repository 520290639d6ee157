"""SONiC COUNTERS_DB over gNMI (Subscribe/Get with prefix target ``COUNTERS_DB``) → samples.

The SONiC telemetry server (sonic-gnmi) serves the redis tables as JSON: a raw object
(``COUNTERS/oid:0x15…`` → ``{"SAI_QUEUE_STAT_PACKETS": "12", …}``) or a virtual path that already
names the objects (``COUNTERS/Ethernet*/Queues`` → ``{"Ethernet68:3": {…}}``, ``COUNTERS/Ethernet*``
→ ``{"Ethernet68": {…}}``). Object ids are resolved through the name maps SONiC publishes in the
same database (``COUNTERS_PORT_NAME_MAP``, ``COUNTERS_QUEUE_NAME_MAP``, ``COUNTERS_PG_NAME_MAP``),
remembered across notifications by the caller. Field → metric is the table below, not code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

TARGET = "COUNTERS_DB"


@dataclass(frozen=True, slots=True)
class Field:
    metric: str
    label: str = ""  # "queue" / "priority_group": the object's index becomes this label; "" = port
    extra: tuple[tuple[str, str], ...] = ()


FIELDS: dict[str, Field] = {
    "SAI_QUEUE_STAT_PACKETS": Field("tx_queue_packets_total", "queue"),
    "SAI_QUEUE_STAT_BYTES": Field("tx_queue_bytes_total", "queue"),
    "SAI_QUEUE_STAT_DROPPED_PACKETS": Field("queue_dropped_packets_total", "queue"),
    "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": Field("ecn_marked_packets_total", "queue"),
    "SAI_QUEUE_STAT_CURR_OCCUPANCY_BYTES": Field("queue_occupancy_bytes", "queue"),
    "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES": Field("queue_watermark_bytes", "queue"),
    "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED": Field("pfc_deadlock_total", "queue"),
    # ingress priority groups: PFC headroom (xoff room) and shared buffer peaks of one PG
    "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES": Field(
        "queue_watermark_bytes", "priority_group", (("buffer", "shared"),)),
    "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES": Field(
        "queue_watermark_bytes", "priority_group", (("buffer", "headroom"),)),
    "SAI_PORT_STAT_IF_IN_OCTETS": Field("rx_bytes_total"),
    "SAI_PORT_STAT_IF_OUT_OCTETS": Field("tx_bytes_total"),
    "SAI_PORT_STAT_IF_IN_DISCARDS": Field("rx_discards_total"),
    "SAI_PORT_STAT_IF_OUT_DISCARDS": Field("tx_discards_total"),
    "SAI_PORT_STAT_IF_IN_ERRORS": Field("rx_errors_total"),
    "SAI_PORT_STAT_IF_OUT_ERRORS": Field("tx_errors_total"),
}
# per-priority PFC frames: SAI_PORT_STAT_PFC_<n>_RX_PKTS / _TX_PKTS (not the ON2OFF / DURATION ones)
PFC = re.compile(r"SAI_PORT_STAT_PFC_(\d)_(RX|TX)_PKTS")
PFC_METRIC = {"RX": "rx_pause_frames_total", "TX": "tx_pause_frames_total"}
# Watermark tables: PERIODIC is the peak since the last telemetry interval (what the catalogue means),
# USER since the last user read, PERSISTENT the all-time peak; the lowest rank present wins.
TABLE_RANK = {"PERIODIC_WATERMARKS": 0, "USER_WATERMARKS": 1, "COUNTERS": 2, "PERSISTENT_WATERMARKS": 3}
NAME_MAPS = ("COUNTERS_PORT_NAME_MAP", "COUNTERS_QUEUE_NAME_MAP", "COUNTERS_PG_NAME_MAP")
_PERIODIC = ":periodic"  # the Queues virtual path lists periodic watermarks as "Ethernet68:1:periodic"


@dataclass
class SonicRows:
    # (port, metric, labels) → (rank, value)
    best: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, float]] = field(default_factory=dict)
    unmapped: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _objects(rest: list[str], value: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(object name, its fields) from one update: keyed by object, one object, or one field."""
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) for v in value.values()):
            yield from value.items()
        elif rest:
            yield rest[0], value
    elif len(rest) >= 2:
        yield rest[-2], {rest[-1]: value}


def _resolve(obj: str, kind: str, names: Mapping[str, str]) -> tuple[str, str] | None:
    """Object name → (port, index); None when the object is not of that kind or unknown."""
    name = names.get(obj, obj)
    if name.startswith("oid:"):
        return None
    if not kind:
        return name, ""
    port, _, index = name.rpartition(":")
    return (port, index) if port and index.isdigit() else None


def update(out: SonicRows, elems: list[str], value: Any, names: MutableMapping[str, str]) -> None:
    """Fold one update (path elements below the target, decoded JSON value) into ``out``."""
    if not elems:
        return
    table, rest = elems[0], elems[1:]
    if table in NAME_MAPS:
        pairs = value.items() if isinstance(value, dict) else [(rest[-1], value)] if rest else []
        for name, oid in pairs:
            names[str(oid)] = str(name)
        return
    for obj, fields in _objects(rest, value):
        rank = TABLE_RANK.get(table, 2)
        if obj.endswith(_PERIODIC):
            obj, rank = obj[: -len(_PERIODIC)], TABLE_RANK["PERIODIC_WATERMARKS"]
        for key, raw in fields.items():
            pfc = PFC.fullmatch(key)
            f = Field(PFC_METRIC[pfc[2]], "priority") if pfc else FIELDS.get(key)
            if f is None:
                if ("_STAT_" in key or "_STATS_" in key) and not key.endswith("_last"):
                    out.unmapped.add(key)  # a counter we do not map (not attributes/status fields)
                continue
            where = _resolve(obj, "" if pfc else f.label, names)
            if where is None:
                out.problems.append(f"{table}:{obj} {key}: object is not a known {f.label or 'port'}")
                continue
            port, index = where
            labels = ((("priority", pfc[1]),) if pfc else ((f.label, index),) if f.label else ()) + f.extra
            try:
                v = float(int(str(raw)))
            except ValueError:
                out.problems.append(f"{table}:{obj} {key}={raw!r} is not a number")
                continue
            k = (port, f.metric, labels)
            if k not in out.best or rank < out.best[k][0]:
                out.best[k] = (rank, v)
