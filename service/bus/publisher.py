"""Publishing batches to JetStream from asyncio code (the HTTP API in ``ingest_mode=nats``).

One lazily opened connection per process. ``publish`` returns only once JetStream has stored the
batch (its PubAck), so "accepted" means durable in the stream; any failure to get that ack is a
:class:`BusUnavailable` (the API answers 503 + Retry-After, as for a database outage).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from fabricscope.core.errors import FabricscopeError
from fabricscope.service.bus import codec, stream
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.bus")


class BusUnavailable(FabricscopeError):
    """JetStream did not acknowledge the batch (NATS down, stream full, timeout)."""


class MessageTooLarge(BusUnavailable):
    """The encoded batch is over the server's max_payload: split it."""


@dataclass(frozen=True, slots=True)
class Published:
    seq: int
    duplicate: bool


class BusPublisher:
    def __init__(self, settings: Settings, *, name: str = "fabricscope-publisher") -> None:
        self._settings = settings
        self._name = name
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:  # never the URL's password
        return f"BusPublisher({stream.redact(self._settings.nats_url.get_secret_value())!r})"

    async def _context(self) -> JetStreamContext:
        if self._js is not None and self._nc is not None and not self._nc.is_closed:
            return self._js
        async with self._lock:
            if self._js is None or self._nc is None or self._nc.is_closed:
                url = self._settings.nats_url.get_secret_value()
                try:
                    nc = await stream.connect(url, name=self._name)
                    js = nc.jetstream(timeout=self._settings.nats_timeout_s)
                    await stream.ensure_streams(js, self._settings)
                except (TimeoutError, OSError, NatsError) as exc:
                    raise BusUnavailable(f"NATS at {stream.redact(url)} unavailable: {type(exc).__name__}") from exc
                self._nc, self._js = nc, js
        assert self._js is not None
        return self._js

    async def publish(self, kind: str, body: dict[str, Any]) -> Published:
        js = await self._context()
        subj, data, headers = codec.encode(kind, body)
        if self._nc is not None and len(data) > self._nc.max_payload:
            raise MessageTooLarge(f"batch of {len(data)} bytes is over NATS max_payload {self._nc.max_payload}")
        try:
            ack = await js.publish(subj, data, headers=headers, timeout=self._settings.nats_timeout_s)
        except (TimeoutError, OSError, NatsError) as exc:
            # Includes "maximum bytes exceeded" (stream full: back-pressure) and no responders.
            raise BusUnavailable(f"JetStream did not store the batch: {type(exc).__name__}: {exc}") from exc
        return Published(int(ack.seq), bool(ack.duplicate))

    async def close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.drain()
            except (TimeoutError, NatsError, OSError):
                await nc.close()
