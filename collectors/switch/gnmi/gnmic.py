"""``fabricscope parse`` format ``gnmic-json``: what ``gnmic subscribe`` / ``gnmic get`` print by
default (``--format json``), a stream of JSON objects, one per Notification::

    {"source": "10.188.52.108:9339", "subscription-name": "default-1737725382",
     "timestamp": 1737725390247535267, "time": "...",
     "updates": [{"Path": "qos/interfaces/interface[interface-id=swp1]/.../transmit-octets",
                  "values": {"qos/interfaces/interface/.../transmit-octets": 0}}]}

plus ``{"sync-response": true}`` markers; or, with ``--format event`` (and gnmic's file, Kafka and NATS
outputs), ``{"name", "timestamp", "tags": {"interface_name": ..}, "values": {"/interface/..": v}}``
(the keys come back from the tags). Operators save these more often than protobuf JSON, so they are
read as they are: each update's keyed ``Path`` (gnmic's xpath syntax, parsed by pygnmi) becomes a
gNMI path, each value a JSON value, and the Notification goes through the same :func:`parse`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pygnmi.create_gnmi_path import gnmi_path_generator

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.errors import ParseError

from .parse import parse
from .proto import gnmi_pb2


def json_stream(text: str) -> Iterator[Any]:
    """The JSON values of a concatenated stream (gnmic prints one object after another)."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return
        value, i = decoder.raw_decode(text, i)
        yield value


def _keyless(path: str) -> str:
    out, depth = [], 0
    for ch in path:
        depth += ch == "["
        if not depth:
            out.append(ch)
        depth -= ch == "]"
    return "".join(out).strip("/")


def event_notification(event: dict[str, Any], problems: list[str]) -> gnmi_pb2.Notification | None:
    """One object of gnmic's ``--format event`` (and its file/Kafka outputs): ``values`` keyed by a
    keyless path, list keys as ``tags`` named ``<element>_<key>`` (``interface_name``)."""
    values, tags = event.get("values"), event.get("tags")
    tags = tags if isinstance(tags, dict) else {}
    if not isinstance(values, dict):
        problems.append(f"gnmic event {str(event.get('name'))[:40]!r} at {event.get('timestamp')} has no values "
                        f"(tags only: {', '.join(sorted(map(str, tags)))[:120]})")
        return None
    n = gnmi_pb2.Notification(timestamp=int(event.get("timestamp") or 0))
    for path, value in values.items():
        elems = []
        for name in (e for e in str(path).strip("/").split("/") if e):
            local = name.rpartition(":")[2]
            keys = {k[len(local) + 1:]: str(v) for k, v in tags.items() if str(k).startswith(local + "_")}
            elems.append(gnmi_pb2.PathElem(name=name, key=keys))
        val = gnmi_pb2.TypedValue(json_ietf_val=json.dumps(value).encode())
        n.update.append(gnmi_pb2.Update(path=gnmi_pb2.Path(elem=elems), val=val))
    return n


def notification(event: dict[str, Any], problems: list[str]) -> gnmi_pb2.Notification | None:
    """One gnmic JSON object → a Notification (``None`` for sync-response and other markers)."""
    if "updates" not in event and ("values" in event or "tags" in event):
        return event_notification(event, problems)
    if not isinstance(event.get("updates"), list):
        if not event.get("sync-response"):
            problems.append(f"gnmic object without updates or values skipped (keys: {', '.join(sorted(event))[:120]})")
        return None
    n = gnmi_pb2.Notification(timestamp=int(event.get("timestamp", 0)))
    if event.get("prefix"):
        n.prefix.CopyFrom(gnmi_path_generator(str(event["prefix"])))
    for u in event["updates"]:
        keyed = str(u.get("Path", "")) if isinstance(u, dict) else ""
        values = u.get("values") if isinstance(u, dict) else None
        if not keyed or not isinstance(values, dict):
            problems.append(f"gnmic update without Path/values: {u!r:.120}")
            continue
        base = _keyless(keyed)
        for leaf, value in values.items():
            # ``values`` is keyed by the keyless path: the update's own path, or a leaf below it
            rest = _keyless(str(leaf))
            if rest != base and not rest.startswith(base + "/"):
                problems.append(f"gnmic value {leaf} is not under {keyed}")
                continue
            path = gnmi_path_generator(keyed + rest[len(base):])
            val = gnmi_pb2.TypedValue(json_ietf_val=json.dumps(value).encode())
            n.update.append(gnmi_pb2.Update(path=path, val=val))
    return n


def read_gnmic_json(path: Path, device: str, _ts: float) -> Reading:
    problems: list[str] = []
    try:
        events = list(json_stream(path.read_text()))
    except ValueError as exc:
        raise ParseError(f"not gnmic JSON output: {exc}") from exc
    # ``gnmic get`` prints one JSON array of events; ``subscribe`` prints the events one after another
    flat = [e for item in events for e in (item if isinstance(item, list) else [item])]
    notes = [n for n in (notification(e, problems) for e in flat if isinstance(e, dict)) if n is not None]
    batch = parse(device, notes)  # each event carries its own timestamp (ns)
    return Reading(samples=batch.samples, unmapped=batch.unmapped_list(), problems=problems + batch.problems)


def sniff(_path: Path, head: str) -> bool:
    if head.lstrip()[:1] not in ("{", "["):
        return False
    updates = '"updates"' in head and ('"Path"' in head or '"subscription-name"' in head)
    events = '"values"' in head and '"tags"' in head and '"timestamp"' in head  # --format event
    return updates or events


FORMAT = Format("gnmic-json", "gnmic subscribe/get output: --format json (Path/values updates) or event (tags/values)",
                sniff=sniff, read=read_gnmic_json, priority=50)
