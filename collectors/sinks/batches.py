"""Queued items into batches, and a batch into what the transports take. Standard library only.

A batch record (``{"kind", "job", "items" | "body", "batch_id"}``) is what the spool stores, so a
replay after a restart re-sends the same batch id and the service keeps it once.
"""

from __future__ import annotations

import uuid
from typing import Any

from fabricscope.core import wire
from fabricscope.core.transport import Batch


def group(items: list[tuple[str, str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Batch records in first-seen order, one per (kind, job); job registrations one each."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for kind, job, item in items:
        if kind == "job":
            out.append({"kind": "job", "job": job, "body": item})
            continue
        lst = groups.get((kind, job))
        if lst is None:
            lst = groups[(kind, job)] = []
            out.append({"kind": kind, "job": job, "items": lst})
        lst.append(item)
    for rec in out:
        rec["batch_id"] = uuid.uuid4().hex
    return out


def encode(rec: dict[str, Any]) -> tuple[Batch | None, int]:
    """(the batch to send or None when nothing of it is JSON, how many items were not strict JSON).
    Items with NaN/inf are removed from the record itself, so a spooled copy is clean too."""
    kind, job = rec["kind"], rec.get("job")
    if kind == "job":
        try:
            return Batch(kind, job, rec["batch_id"], rec["body"], wire.dumps(rec["body"])), 0
        except ValueError:
            return None, 1
    body = wire.batch_body(kind, rec["items"], batch_id=rec["batch_id"], job=job)
    try:
        return Batch(kind, job, rec["batch_id"], body, wire.dumps_yielding(body, kind)), 0
    except ValueError:  # NaN/inf somewhere: drop just the items that are not JSON
        good = [it for it in rec["items"] if wire.json_ok(it)]
        dropped = len(rec["items"]) - len(good)
        rec["items"][:] = good
        if not good:
            return None, dropped
        body = wire.batch_body(kind, good, batch_id=rec["batch_id"], job=job)
        return Batch(kind, job, rec["batch_id"], body, wire.dumps(body)), dropped


def n_items(rec: dict[str, Any]) -> int:
    return len(rec["items"]) if "items" in rec else 1


def drop_items(rec: dict[str, Any], named: tuple[int, ...]) -> int:
    """Remove the items at the (sorted) positions ``named`` from ``rec``, the ones a service refused
    by name, and say how many went. 0, and ``rec`` untouched, unless ``named`` is a proper part of
    the batch: when nothing or every item was named, or a position the batch does not have, the
    whole batch is refused. Each call that removes something shrinks the batch, so resending the
    rest cannot loop."""
    items = rec.get("items")
    if not items or not named or named[0] < 0 or named[-1] >= len(items) or len(set(named)) >= len(items):
        return 0
    bad = set(named)
    rec["items"] = [it for i, it in enumerate(items) if i not in bad]
    return len(bad)


__all__ = ["drop_items", "encode", "group", "n_items"]
