"""Pure NETCONF parse: an ``<rpc-reply>`` to ``<get>`` → samples, using a :class:`Model` table."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

from fabricscope.core.errors import ParseError
from fabricscope.core.model import Sample
from fabricscope.core.values import counter, shown

from .models import OC_ETH, OC_SPEEDS, Leaf, Model, SubList

_NC = "urn:ietf:params:xml:ns:netconf:base:1.0"
# a leaf of type "speed" above this is a sentinel for "unknown" (yuma123 reports 2**64 - 10**6)
_MAX_SPEED = 1.6e13
_JUNOS_SPEED = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)bps", re.IGNORECASE)  # "40Gbps", "800mbps"
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


@dataclass
class NetconfPoll:
    samples: list[Sample] = field(default_factory=list)
    counter_epoch: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _path(p: str, model: Model) -> str:
    return p.format(ns=f"{{{model.namespace}}}", eth=f"{{{OC_ETH}}}")


def _value(leaf: Leaf, raw: str) -> float | None:
    raw = raw.strip()
    if leaf.transform == "up":
        return 1.0 if raw.lower() == "up" else 0.0
    if leaf.transform == "oc_speed":
        return OC_SPEEDS.get(raw.rpartition(":")[2])
    if leaf.transform == "junos_speed":  # "Unlimited", "Auto" and the like: no speed
        m = _JUNOS_SPEED.fullmatch(raw)
        return float(m[1]) * _SCALE[m[2].lower()] if m else None
    value = counter(raw)  # counters are uint64: a fraction, text or 21 digits here is a bad value
    if leaf.transform == "speed_bps" and value > _MAX_SPEED:
        return None
    return value


def _body(root: ET.Element, model: Model) -> ET.Element | None:
    """The element the model's entry path starts from. A vendor RPC's reply holds its entries
    directly and a <get> reply holds them in <data>; a reply body saved without its <rpc-reply>
    envelope (a Junos ``<interface-information>``, a bare ``<data>`` or ``<interfaces>``) is read the
    same, as if the envelope were there."""
    local = root.tag.rpartition("}")[2]
    if local == "rpc-reply":
        return root if model.rpcs else root.find(f"{{{_NC}}}data")
    if local == "data":
        return root
    holder = ET.Element("data")
    holder.append(root)
    return holder


def parse(
    device: str, reply_xml: str | bytes, model: Model, ts: float, wants: Callable[[str], bool] | None = None
) -> NetconfPoll:
    try:
        root = ET.fromstring(reply_xml)
    except ET.ParseError as exc:
        raise ParseError(f"{device}: reply is not XML: {exc}") from exc
    data = _body(root, model)
    if data is None:
        raise ParseError(f"{device}: rpc-reply without <data>")
    out = NetconfPoll()
    required: dict[tuple[str, int], int] = defaultdict(int)
    for leaf in model.leaves:
        required[(leaf.metric, leaf.rank)] += leaf.required
    for entry in data.iterfind(_path(model.entries, model)):
        name = (entry.findtext(_path(model.name_path, model)) or "").strip()
        if not name:
            out.problems.append("interface entry without a name, skipped")
            continue
        if wants is not None and not wants(name):
            continue
        source = f"{device}:{name}"
        parts: dict[tuple[str, int], list[float]] = defaultdict(list)
        seen_required: dict[tuple[str, int], int] = defaultdict(int)
        for leaf in model.leaves:
            raw = entry.findtext(_path(leaf.path, model))
            if raw is None:
                continue
            try:
                value = _value(leaf, raw)
            except ValueError:
                out.problems.append(f"{device}:{name}: {leaf.path.rpartition('}')[2]}={shown(raw)} is not a counter")
                continue
            if value is None:
                continue
            parts[(leaf.metric, leaf.rank)].append(value)
            seen_required[(leaf.metric, leaf.rank)] += leaf.required
        best: dict[str, tuple[int, float]] = {}
        for (metric, rank), values in parts.items():
            if seen_required[(metric, rank)] < required[(metric, rank)]:
                continue
            if metric not in best or rank < best[metric][0]:
                best[metric] = (rank, sum(values))
        for metric, (_, value) in sorted(best.items()):
            out.samples.append(Sample(ts, source, metric, value))
        for sub in model.lists:
            _sublist(out, entry, sub, model, source, name, ts)
        if model.epoch_path:
            epoch = entry.findtext(_path(model.epoch_path, model))
            if epoch is not None:
                out.counter_epoch[source] = epoch.strip()
    return out


def _sublist(out: NetconfPoll, entry: ET.Element, sub: SubList, model: Model, source: str, name: str,
             ts: float) -> None:
    for item in entry.iterfind(_path(sub.entries, model)):
        key = (item.findtext(_path(sub.key_path, model)) or "").strip()
        if not key:
            out.problems.append(f"{name}: {sub.label} entry without a key, skipped")
            continue
        for leaf in sub.leaves:
            raw = item.findtext(_path(leaf.path, model))
            if raw is None:
                continue
            try:
                value = _value(leaf, raw)
            except ValueError:
                out.problems.append(f"{source} {sub.label} {key}: {leaf.path.rpartition('}')[2]}={shown(raw)} "
                                    "is not a counter")
                continue
            if value is not None:
                out.samples.append(Sample(ts, source, leaf.metric, value, {sub.label: key}))


OC_LLDP = "http://openconfig.net/yang/lldp"
LLDP_FILTER = f'<lldp xmlns="{OC_LLDP}"><interfaces/></lldp>'


def lldp_rows(reply_xml: str | bytes) -> list[tuple[str, dict[str, str]]]:
    """openconfig-lldp reply → ``(local interface, neighbour state leaves)`` rows."""
    try:
        root = ET.fromstring(reply_xml)
    except ET.ParseError as exc:
        raise ParseError(f"LLDP reply is not XML: {exc}") from exc
    ns = f"{{{OC_LLDP}}}"
    rows: list[tuple[str, dict[str, str]]] = []
    for itf in root.iter(f"{ns}interface"):
        local = (itf.findtext(f"{ns}name") or "").strip()
        for state in itf.iterfind(f"{ns}neighbors/{ns}neighbor/{ns}state"):
            leaves = {child.tag.rpartition("}")[2]: (child.text or "").strip() for child in state}
            rows.append((local, leaves))
    return rows
