"""``fabricscope parse`` format ``gnmi-json``: recorded gNMI SubscribeResponses (or Notifications) in
the protobuf JSON mapping, as a JSON list or one object — OpenConfig paths and SONiC COUNTERS_DB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from google.protobuf.json_format import ParseError as ProtoParseError

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.errors import ParseError

from . import gnmic
from .parse import parse
from .proto import gnmi_pb2


def _notification(item: dict[str, Any]) -> gnmi_pb2.Notification | None:
    """A SubscribeResponse carries its Notification in ``update``; a bare Notification is one."""
    if "update" in item and isinstance(item["update"], dict):
        return ParseDict(item, gnmi_pb2.SubscribeResponse()).update
    if "syncResponse" in item or "sync_response" in item:
        return None
    return ParseDict(item, gnmi_pb2.Notification())


def read_gnmi_json(path: Path, device: str, _ts: float) -> Reading:
    try:
        doc = json.loads(path.read_text())
        items = doc if isinstance(doc, list) else [doc]
        notes = [n for n in (_notification(i) for i in items if isinstance(i, dict)) if n is not None]
    except (ValueError, ProtoParseError) as exc:
        raise ParseError(f"not gNMI protobuf JSON: {exc}") from exc
    batch = parse(device, notes)  # notifications carry their own timestamps
    return Reading(samples=batch.samples, unmapped=batch.unmapped_list(), problems=batch.problems)


def _sniff(_path: Path, head: str) -> bool:
    start = head.lstrip()[:1]
    return start in ("[", "{") and '"update"' in head and ('"elem"' in head or '"prefix"' in head)


FORMATS = (
    Format("gnmi-json", "gNMI SubscribeResponse/Notification list, protobuf JSON (OpenConfig, SONiC COUNTERS_DB)",
           sniff=_sniff, read=read_gnmi_json, priority=50),
    gnmic.FORMAT,
)
