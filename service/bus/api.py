"""HTTP ingest in ``ingest_mode=nats``: the route validated the body; publish it instead of writing.

The answer keeps the v1 shape ``{"accepted": N}``: N items are durable in JetStream and a writer
will commit them (idempotently, with this batch id). A body without a ``batch_id`` gets one here,
so the bus never carries a batch that is unsafe to redeliver. NATS unreachable or the stream full
→ 503 + Retry-After, like a database outage. A batch too large for one NATS message is split in
halves with derived batch ids (``<id>.0``, ``<id>.1``), deterministically, so a client's retry of
the whole batch maps onto the same parts and is still deduplicated.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, HTTPException

from fabricscope.service.bus import codec
from fabricscope.service.bus.publisher import BusPublisher, BusUnavailable, MessageTooLarge
from fabricscope.service.settings import Settings

_lock = asyncio.Lock()


async def publisher(app: FastAPI, settings: Settings) -> BusPublisher:
    bus: BusPublisher | None = getattr(app.state, "bus", None)
    if bus is None:
        async with _lock:
            bus = getattr(app.state, "bus", None)
            if bus is None:
                bus = app.state.bus = BusPublisher(settings, name="fabricscope-api")
    return bus


async def publish_batch(app: FastAPI, settings: Settings, kind: str, body: dict[str, Any], n: int) -> dict[str, Any]:
    bus = await publisher(app, settings)
    codec.ensure_batch_id(body)
    try:
        dup = await _publish_split(bus, kind, body)
    except BusUnavailable as exc:
        raise HTTPException(503, detail=f"ingest bus unavailable, retry later ({exc})",
                            headers={"Retry-After": str(settings.retry_after_s)}) from exc
    return {"accepted": n, "duplicate": True} if dup else {"accepted": n}


async def _publish_split(bus: BusPublisher, kind: str, body: dict[str, Any]) -> bool:
    """Publish (splitting when over max_payload); True when JetStream had every part already."""
    try:
        return (await bus.publish(kind, body)).duplicate
    except MessageTooLarge:
        items = body[kind]  # the items' key is the kind's name (docs/API.md)
        if len(items) < 2:
            raise HTTPException(413, detail=[{"loc": ["body", kind, 0], "msg": "one item is larger than a NATS "
                                              "message may be (server max_payload)", "type": "too_long"}]) from None
        half = len(items) // 2
        parts = [{**body, kind: items[:half], "batch_id": f"{body['batch_id']}.0"},
                 {**body, kind: items[half:], "batch_id": f"{body['batch_id']}.1"}]
        dups = [await _publish_split(bus, kind, p) for p in parts]
        return all(dups)
