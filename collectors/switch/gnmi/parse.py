"""Pure gNMI parse: ``Notification`` messages → samples, LLDP rows and counter epochs.

Values may come as scalars (``uint_val``…) or as JSON (``json_ietf_val``) holding a scalar or a
whole subtree; subtrees are flattened into leaf paths first. A value that does not fit its leaf is
recorded in ``problems`` and skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from fabricscope.core.model import Sample
from fabricscope.core.values import counter

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
    # every leaf path (keys removed) and SONiC stat field seen but not mapped -> how often it came
    unmapped: Counter[str] = field(default_factory=Counter)

    def unmapped_list(self) -> list[str]:
        """``path (count)`` for each unmapped path, most frequent first, so a user sees what came."""
        return [f"{p} ({n})" for p, n in sorted(self.unmapped.items(), key=lambda kv: (-kv[1], kv[0]))]


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
    return counter(value)  # the one device-value conversion: a bad value is skipped and named


def _sonic(device: str, n: gnmi_pb2.Notification, names: MutableMapping[str, str], out: GnmiBatch,
           wants: Callable[[str], bool] | None) -> None:
    rows = sonic.SonicRows()
    prefix = [e.name for e in n.prefix.elem]  # SONiC names hold colons ("Ethernet68:3"): keep them whole
    for u in n.update:
        try:
            value = _typed(u.val)
        except ValueError as exc:
            out.problems.append(f"{device} {'/'.join(prefix + [e.name for e in u.path.elem])}: {exc}")
            continue
        sonic.update(rows, prefix + [e.name for e in u.path.elem], value, names)
    ts = n.timestamp / 1e9
    for (port, metric, labels), (_, v) in sorted(rows.best.items()):
        if wants is None or wants(port):
            out.samples.append(Sample(ts, f"{device}:{port}", metric, v, dict(labels) if labels else None))
    out.unmapped.update(rows.unmapped)
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
            elems = prefix + _elems(u.path)
            try:
                value = _typed(u.val)
            except ValueError as exc:  # one non-JSON value costs that update only
                shown = "/".join(e + "".join(f"[{k}={v}]" for k, v in sorted(keys.items())) for e, keys in elems)
                out.problems.append(f"{device} {shown}: value is not JSON ({exc})")
                continue
            leaves.extend(_flatten(elems, value))
        # an interface name is a key on the `interface` element, or (Ciena) a `name` leaf beside
        # the counters of the same notification
        fallback = next((str(v).strip('"') for e, v in leaves if tuple(x[0] for x in e) == paths.NAME_LEAF), "")
        best: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, float]] = {}
        parts: dict[tuple[str, str, tuple[tuple[str, str], ...]], dict[Key, float]] = {}
        for elems, value in leaves:
            key: Key = tuple(e[0] for e in elems)
            itf = next((k.get(ik, "") for name, k in elems for ik in paths.INTERFACE_ELEMENTS.get(name, ())
                        if k.get(ik)), "") or fallback  # fmt: skip
            if wants is not None and itf and not wants(itf):
                continue
            if not itf:
                out.unmapped["/".join(key)] += 1  # no interface to put it on: seen, not read
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
                elif key in paths.OPER_STATES:
                    best[(source, "oper_up", ())] = (0, 1.0 if str(value).upper() == "UP" else 0.0)
                elif key == paths.PORT_SPEED and str(value).rpartition(":")[2] in OC_SPEEDS:
                    best[(source, "speed_bps", ())] = (0, OC_SPEEDS[str(value).rpartition(":")[2]])
                elif key == paths.LAST_CLEAR:
                    counter(value)  # validates: a bad epoch is named like any bad value
                    out.counter_epoch[source] = int(value)  # ns since epoch: keep every digit
                elif key[:1] == ("lldp",) and len(elems) >= 2 and elems[-2][0] == "state":
                    nbr = next((k.get("id", "") for name, k in elems if name == "neighbor"), "")
                    out.lldp.setdefault((itf, nbr), {})[key[-1]] = str(value)
                elif key not in paths.KNOWN_LEAVES:
                    out.unmapped["/".join(key)] += 1
            except (ValueError, TypeError) as exc:
                out.problems.append(f"{device}:{itf} {'/'.join(key)}: {exc}")
        for (source, metric, labels), (_, v) in sorted(best.items()):
            out.samples.append(Sample(ts, source, metric, v, dict(labels) if labels else None))
    return out
