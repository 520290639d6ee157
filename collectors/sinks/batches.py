"""Queued items into batches, and a batch into what the transports take. Standard library only.

A batch record (``{"kind", "job", "items" | "body", "batch_id"}``) is what the spool stores, so a
replay after a restart re-sends the same batch id and the service keeps it once.
"""

from __future__ import annotations

import uuid
from typing import Any

from fabricscope.core import wire, wiresafe
from fabricscope.core.transport import Batch
from fabricscope.core.wiresafe import clean_item


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


def encode(rec: dict[str, Any]) -> tuple[Batch | None, list[str]]:
    """(the batch to send, or None when nothing of it can be; why each item left out was).

    Items the server could not read (NaN/inf, a lone surrogate, an integer past a double's range:
    core/wiresafe.py) are removed from the record itself, so a spooled copy is clean too, and
    names that are not UTF-8 are written reversibly in it. The whole-batch encoding is the fast
    path; items are checked one by one only when it fails or its text looks suspect."""
    kind, job = rec["kind"], rec.get("job")
    if kind == "job":
        body, why = clean_item(rec["body"])
        try:
            if why is None:
                return Batch(kind, job, rec["batch_id"], body, wire.dumps(body)), []
        except ValueError as exc:
            why = str(exc)
        return None, [f"job {job}: {why}"]
    body = wire.batch_body(kind, rec["items"], batch_id=rec["batch_id"], job=job)
    try:
        text = wire.dumps_yielding(body, kind)
        if not wiresafe.maybe_unsafe(text):
            return Batch(kind, job, rec["batch_id"], body, text), []
    except ValueError:  # NaN/inf, or an int too long for str(): some item is not JSON
        pass
    good, dropped = [], []
    for i, it in enumerate(rec["items"]):
        clean, why = clean_item(it)
        if why is None and not wire.json_ok(clean):
            why = "not strict JSON"
        if why is None:
            good.append(clean)
        else:
            dropped.append(f"item {i}: {why}")
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
