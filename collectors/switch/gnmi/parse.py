"""Pure gNMI parse: ``Notification`` messages → samples, LLDP rows and counter epochs.

Values may come as scalars (``uint_val``…) or as JSON (``json_ietf_val``) holding a scalar or a
whole subtree; subtrees are flattened into leaf paths first. A value that does not fit its leaf is
recorded in ``problems`` and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from fabricscope.core.model import Sample

from ..netconf.models import OC_SPEEDS
from . import paths, sonic
from .proto import gnmi_pb2

Key = tuple[str, ...]


@dataclass
class GnmiBatch:
    samples: list[Sample] = field(default_factory=list)
    counter_epoch: dict[str, int] = field(default_factory=dict)
    lldp: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (if, neighbor id)
    problems: list[str] = field(default_factory=list)
    unmapped: set[str] = field(default_factory=set)  # SONiC stat fields seen but not mapped


def _elems(path: gnmi_pb2.Path) -> list[tuple[str, dict[str, str]]]:
    return [(e.name.rpartition(":")[2], dict(e.key)) for e in path.elem]


def _typed(v: gnmi_pb2.TypedValue) -> Any:
    kind = v.WhichOneof("value")
    if kind in ("json_ietf_val", "json_val"):
        return json.loads(getattr(v, kind))
    if kind is None:
        return None
    return getattr(v, kind)


_LIST_KEYS = ("name", "id", "index", "interface-id", "priority")


def _flatten(elems: list[tuple[str, dict[str, str]]], value: Any) -> Iterator[tuple[list[Any], Any]]:
    """Expand a JSON subtree into (elems, leaf value); list entries take their ``name``/``id`` key."""
    if isinstance(value, dict):
        for k, v in value.items():
            name = k.rpartition(":")[2]
            if isinstance(v, list):
                for item in v:
                    key = {kk: str(item[kk]) for kk in _LIST_KEYS if isinstance(item, dict) and kk in item}
                    yield from _flatten([*elems, (name, key)], item)
            else:
                yield from _flatten([*elems, (name, {})], v)
    else:
        yield elems, value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a number")
    return float(int(value)) if isinstance(value, str) else float(value)


def _sonic(device: str, n: gnmi_pb2.Notification, names: MutableMapping[str, str], out: GnmiBatch,
           wants: Callable[[str], bool] | None) -> None:
    rows = sonic.SonicRows()
    prefix = [e.name for e in n.prefix.elem]  # SONiC names hold colons ("Ethernet68:3"): keep them whole
    for u in n.update:
        try:
            value = _typed(u.val)
        except ValueError as exc:
            out.problems.append(f"{'/'.join(prefix + [e.name for e in u.path.elem])}: {exc}")
            continue
        sonic.update(rows, prefix + [e.name for e in u.path.elem], value, names)
    ts = n.timestamp / 1e9
    for (port, metric, labels), (_, v) in sorted(rows.best.items()):
        if wants is None or wants(port):
            out.samples.append(Sample(ts, f"{device}:{port}", metric, v, dict(labels) if labels else None))
    out.unmapped |= rows.unmapped
    out.problems.extend(rows.problems)


def parse(
    device: str,
    notifications: Iterable[gnmi_pb2.Notification],
    wants: Callable[[str], bool] | None = None,
    names: MutableMapping[str, str] | None = None,
) -> GnmiBatch:
    """``names``: SONiC object id → name, kept by the caller across notifications of one stream."""
    out = GnmiBatch()
    names = {} if names is None else names
    for n in notifications:
        if n.prefix.target == sonic.TARGET:
            _sonic(device, n, names, out, wants)
            continue
        ts = n.timestamp / 1e9
        prefix = _elems(n.prefix)
        leaves: list[tuple[list[Any], Any]] = []
        for u in n.update:
            leaves.extend(_flatten(prefix + _elems(u.path), _typed(u.val)))
        # an interface name is a key on the `interface` element, or (Ciena) a `name` leaf beside
        # the counters of the same notification
        fallback = next((str(v).strip('"') for e, v in leaves if tuple(x[0] for x in e) == paths.NAME_LEAF), "")
        best: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, float]] = {}
        parts: dict[tuple[str, str, tuple[tuple[str, str], ...]], dict[Key, float]] = {}
        for elems, value in leaves:
            key: Key = tuple(e[0] for e in elems)
            itf = next((k.get(ik, "") for name, k in elems if name == "interface" for ik in paths.INTERFACE_KEYS
                        if k.get(ik)), "") or fallback  # fmt: skip
            if not itf or (wants is not None and not wants(itf)):
                continue
            source = f"{device}:{itf}"
            labels = tuple((paths.LABEL_ELEMENTS[name][0], k[paths.LABEL_ELEMENTS[name][1]]) for name, k in elems
                           if name in paths.LABEL_ELEMENTS and paths.LABEL_ELEMENTS[name][1] in k)  # fmt: skip
            try:
                if key in paths.COUNTERS:
                    metric, rank = paths.COUNTERS[key]
                    v = _number(value)
                    at = (source, metric, labels)
                    if at not in best or rank < best[at][0]:
                        best[at] = (rank, v)
                        parts[at] = {key: v}
                    elif rank == best[at][0]:
                        # two leaves of one rank are parts of one count (WRED + no-buffer drops);
                        # the same leaf again replaces its own part
                        parts[at][key] = v
                        best[at] = (rank, sum(parts[at].values()))
                elif key == paths.OPER_STATUS:
                    best[(source, "oper_up", ())] = (0, 1.0 if str(value).upper() == "UP" else 0.0)
                elif key == paths.PORT_SPEED and str(value).rpartition(":")[2] in OC_SPEEDS:
                    best[(source, "speed_bps", ())] = (0, OC_SPEEDS[str(value).rpartition(":")[2]])
                elif key == paths.LAST_CLEAR:
                    out.counter_epoch[source] = int(value)  # ns since epoch: keep every digit
                elif key[:1] == ("lldp",) and len(elems) >= 2 and elems[-2][0] == "state":
                    nbr = next((k.get("id", "") for name, k in elems if name == "neighbor"), "")
                    out.lldp.setdefault((itf, nbr), {})[key[-1]] = str(value)
            except ValueError as exc:
                out.problems.append(f"{itf} {'/'.join(key)}: {exc}")
        for (source, metric, labels), (_, v) in sorted(best.items()):
            out.samples.append(Sample(ts, source, metric, v, dict(labels) if labels else None))
    return out
