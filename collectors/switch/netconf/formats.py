"""``fabricscope parse`` format ``netconf-reply``: an ``<rpc-reply>`` to ``<get>`` or to a vendor RPC.

The reply does not say which model it is in, so every known model (interfaces models and the
extra ones such as openconfig-qos, Junos native included) reads it and the one that finds the most
samples wins: the models stay a table, with no per-vendor sniffing code.

What the winning model saw but does not map is said, never dropped in silence: every count leaf
(an unsigned integer) inside a counter container of an interface entry (a container whose name
says statistics, counters or errors, such as Junos ``input-error-list`` or OpenConfig
``state/counters``) whose path the model has no row for is listed in ``unmapped`` with how many
interfaces carried it. A reply from which no model read anything is refused with what it held.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.errors import ParseError

from .models import EXTRA_MODELS, MODELS, Model
from .parse import _body, _path, parse

# a container of counters, whatever the vendor calls it: traffic-statistics, input-error-list,
# ethernet-mac-statistics, state/counters, queue-counters, ...
_COUNTER_CONTAINER = re.compile(r"statistic|counter|error", re.IGNORECASE)
_COUNT = re.compile(r"\d{1,20}")
_NAMESPACE = re.compile(r"\{[^}]*\}")


def _local(tag: object) -> str:
    return str(tag).rpartition("}")[2]


def _relative(path: str, model: Model) -> str:
    """A model path (``{ns}a/{ns}b``) as local names (``a/b``), to compare with what a reply holds."""
    return _NAMESPACE.sub("", _path(path, model))


def _mapped_paths(model: Model) -> set[str]:
    paths = {_relative(leaf.path, model) for leaf in model.leaves}
    for sub in model.lists:
        base = _relative(sub.entries, model)
        paths |= {f"{base}/{_relative(leaf.path, model)}" for leaf in sub.leaves}
        paths.add(f"{base}/{_relative(sub.key_path, model)}")
    return paths


def _count_leaves(node: ET.Element, prefix: str, in_counters: bool) -> list[str]:
    out: list[str] = []
    for child in node:
        name = _local(child.tag)
        path = f"{prefix}/{name}" if prefix else name
        if len(child):
            out += _count_leaves(child, path, in_counters or bool(_COUNTER_CONTAINER.search(name)))
        elif in_counters and _COUNT.fullmatch((child.text or "").strip()):
            out.append(path)
    return out


def unmapped_leaves(raw: bytes, model: Model) -> list[str]:
    """Count leaves of the model's interface entries that the model does not read, ``path (N)``."""
    try:
        data = _body(ET.fromstring(raw), model)
    except ET.ParseError:
        return []
    if data is None:
        return []
    mapped = _mapped_paths(model)
    seen: Counter[str] = Counter()
    for entry in data.iterfind(_path(model.entries, model)):
        seen.update(set(_count_leaves(entry, "", False)) - mapped)
    return [f"{path} ({n})" for path, n in sorted(seen.items())]


def _held(raw: bytes) -> str:
    """What a reply no model could read holds: its entries' element names, with counts."""
    try:
        node = ET.fromstring(raw)
    except ET.ParseError:
        return ""
    while _local(node.tag) in ("rpc-reply", "data") and len(node) == 1:
        node = node[0]
    kinds = Counter(_local(child.tag) for child in node)
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(kinds.items()))


def read_netconf_reply(path: Path, device: str, ts: float) -> Reading:
    raw = path.read_bytes()
    best: Reading | None = None
    best_model: Model | None = None
    first_error: ParseError | None = None
    for model in (*MODELS, *EXTRA_MODELS):
        try:
            poll = parse(device, raw, model, ts)
        except ParseError as exc:  # not XML, or not this model's reply shape: try the next model
            first_error = first_error or exc
            continue
        if best is None or len(poll.samples) > len(best.samples):
            best, best_model = Reading(samples=poll.samples, problems=poll.problems), model
    if best is None and first_error is not None and "not XML" in str(first_error):
        raise first_error
    if best is None or best_model is None or not best.samples:
        held = _held(raw)
        raise ParseError("no known model (openconfig, IOS-XR, Junos, ietf-interfaces, openconfig-qos) "
                         "found interfaces in this reply" + (f"; it holds {held}" if held else ""))
    best.unmapped = unmapped_leaves(raw, best_model)
    return best


# a reply, or the body of one saved without its envelope (Junos CLI `| display xml` output included)
_BODY_TAGS = ("<rpc-reply", "<interface-information")

FORMATS = (
    Format("netconf-reply", "NETCONF <rpc-reply> (openconfig-interfaces/-qos, IOS-XR, Junos native, ietf)",
           sniff=lambda _p, head: any(tag in head for tag in _BODY_TAGS), read=read_netconf_reply, priority=50),
)
