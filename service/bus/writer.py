"""``fabricscope writer``: one of N stateless processes draining the ingest stream into the database.

All writers bind the same durable pull consumer, so JetStream hands each batch to one of them.
Per fetched message: decode + validate (the next one is prepared while the current one is
written), one transaction with the batch-id claim, commit, **then** ack. A crash anywhere before
the ack means redelivery, and the claim turns the second write into a no-op: nothing lost, nothing
doubled. Memory is bounded by ``writer_fetch`` messages per process and ``writer_max_ack_pending``
over all writers; a backlog waits in the stream's file storage, not in RAM.

Outcomes: written or duplicate → ack; bad input → published to ``fabricscope.rejected.<kind>``
with the reason, then terminated (never retried); a batch with some bad items → the good ones
written, the bad ones alone dead-lettered with their reasons, then ack; database outage → this and the rest of the fetch
are nak'ed with a growing delay and the writer pauses before it fetches again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import Any

import orjson
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext

from fabricscope.service.bus import codec, stream
from fabricscope.service.bus.handle import OUTAGE, Handler, Outcome, Prepared
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.writer")

_MAX_PAUSE_S = 10.0


class BusWriter:
    def __init__(self, settings: Settings, dsn: str, *, name: str | None = None, stats_every_s: float = 30.0) -> None:
        self.settings = settings
        self.name = name or f"writer-{socket.gethostname()}-{os.getpid()}"
        self.handler = Handler(settings, dsn)
        self.stats = dict.fromkeys(("batches", "rows", "duplicates", "rejected", "retried", "outages",
                                    "rejected_items"), 0)
        self._stats_every = stats_every_s
        self._pause = 0.0
        self._js: JetStreamContext | None = None

    def __repr__(self) -> str:
        return f"BusWriter({self.name!r}, nats={stream.redact(self.settings.nats_url.get_secret_value())!r})"

    async def run(self, stop: asyncio.Event) -> None:
        url = self.settings.nats_url.get_secret_value()
        nc = await self._connect(url, stop)
        if nc is None:
            return
        try:
            js = self._js = nc.jetstream(timeout=self.settings.nats_timeout_s)
            sub = await self._bind(js, stop)
            last_log = time.monotonic()
            while not stop.is_set() and sub is not None:
                try:
                    msgs = await sub.fetch(self.settings.writer_fetch, timeout=1.0)
                except NatsTimeout:
                    msgs = []
                except (NatsError, OSError) as exc:  # disconnected, consumer gone after a wipe, ...
                    log.debug("fetch failed: %s: %s", type(exc).__name__, exc)
                    await _sleep(stop, 0.5)
                    if nc.is_connected:
                        sub = await self._bind(js, stop)
                    continue
                if msgs:
                    await self._process(msgs, stop)
                if time.monotonic() - last_log > self._stats_every:
                    last_log = time.monotonic()
                    log.info("writer %s: %s", self.name, self.stats)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()
            await asyncio.to_thread(self.handler.close)
            log.info("writer %s stopped: %s", self.name, self.stats)

    async def _connect(self, url: str, stop: asyncio.Event) -> Any:
        while not stop.is_set():
            try:
                return await stream.connect(url, name=self.name)
            except (TimeoutError, NatsError, OSError) as exc:
                log.warning("NATS at %s not reachable (%s); retrying", stream.redact(url), type(exc).__name__)
                await _sleep(stop, 1.0)
        return None

    async def _bind(self, js: JetStreamContext, stop: asyncio.Event) -> Any:
        while not stop.is_set():
            try:
                await stream.ensure_streams(js, self.settings)
                return await stream.ensure_consumer(js, self.settings)
            except (TimeoutError, NatsError, OSError) as exc:
                log.warning("JetStream not ready (%s: %s); retrying", type(exc).__name__, exc)
                await _sleep(stop, 1.0)
        return None

    async def _process(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        pending = set(range(len(msgs)))
        keepalive = asyncio.create_task(self._keepalive(msgs, pending))
        try:
            nxt: asyncio.Task[Prepared | Outcome] | None = asyncio.create_task(self._prepare(msgs[0]))
            for i, msg in enumerate(msgs):
                assert nxt is not None
                prepared = await nxt
                nxt = asyncio.create_task(self._prepare(msgs[i + 1])) if i + 1 < len(msgs) else None
                try:
                    outcome = prepared if isinstance(prepared, Outcome) else \
                        await asyncio.to_thread(self.handler.write, prepared)
                except OUTAGE as exc:
                    await self._outage(msgs, pending, exc, nxt)
                    await _sleep(stop, self._pause)
                    return
                except Exception:  # a bug or an unexpected server error: retry later, never drop
                    log.exception("writer %s: batch failed; it will be redelivered", self.name)
                    await self._outage(msgs, pending, None, nxt)
                    await _sleep(stop, self._pause)
                    return
                await self._settle(msg, outcome)
                pending.discard(i)
            self._pause = 0.0
        finally:
            keepalive.cancel()

    async def _prepare(self, msg: Msg) -> Prepared | Outcome:
        md = msg.metadata
        fallback = codec.fallback_batch_id(md.stream, md.sequence.stream)
        return await asyncio.to_thread(self.handler.prepare, msg.subject, msg.data, msg.headers, fallback)

    async def _settle(self, msg: Msg, outcome: Outcome) -> None:
        if outcome.action == "reject":
            if not await self._dead_letter(msg, outcome.reason):
                await _quiet(msg.nak(delay=1.0))  # keep it until the reason can be recorded
                return
            self.stats["rejected"] += 1
            await _quiet(msg.term())
            return
        bad = outcome.rejected
        if bad is not None:
            # The good items are committed: a redelivery to record the bad ones writes nothing twice.
            if not await self._dead_letter(msg, bad.detail, orjson.dumps(bad.body)):
                await _quiet(msg.nak(delay=1.0))
                return
            self.stats["rejected_items"] += len(bad.detail)
        self.stats["batches"] += 1
        if outcome.duplicate:
            self.stats["duplicates"] += 1
        else:
            self.stats["rows"] += outcome.accepted
        if msg.metadata.num_delivered > 1:
            self.stats["retried"] += 1
        await _quiet(msg.ack())  # after commit; a lost ack only means a harmless redelivery

    async def _dead_letter(self, msg: Msg, detail: list[dict[str, Any]] | None, data: bytes | None = None) -> bool:
        """Publish the message (or ``data``, its bad items as plain JSON) with the reason to the dead letters."""
        kind = codec.kind_of(msg.subject) or "unknown"
        reason = orjson.dumps(detail).decode()
        log.warning("writer %s: %s batch (stream seq %d) %s: %s", self.name, kind, msg.metadata.sequence.stream,
                    "rejected" if data is None else f"has {len(detail or ())} bad items", reason[:500])
        headers = {k: v for k, v in (msg.headers or {}).items()
                   if k != codec.MSG_ID and (data is None or k != "Content-Encoding")}
        headers.update({"Fabricscope-Error": reason[:4000], "Fabricscope-Subject": msg.subject})
        try:
            assert self._js is not None
            await self._js.publish(f"{codec.DEAD_PREFIX}.{kind}", msg.data if data is None else data, headers=headers)
            return True
        except (TimeoutError, NatsError, OSError) as exc:
            log.warning("could not dead-letter the batch (%s); it will be redelivered", type(exc).__name__)
            return False

    async def _outage(self, msgs: list[Msg], pending: set[int], exc: BaseException | None,
                      nxt: asyncio.Task[Any] | None) -> None:
        if nxt is not None:
            with contextlib.suppress(Exception):
                await nxt
        self._pause = min(_MAX_PAUSE_S, max(0.5, self._pause * 2))
        if exc is not None:
            self.stats["outages"] += 1
            log.warning("writer %s: database unavailable (%s); %d batches back to the stream, pausing %.1fs",
                        self.name, type(exc).__name__, len(pending), self._pause)
        for i in sorted(pending):
            await _quiet(msgs[i].nak(delay=self._pause))
        pending.clear()

    async def _keepalive(self, msgs: list[Msg], pending: set[int]) -> None:
        # A slow database must not make JetStream hand our batches to another writer meanwhile.
        while True:
            await asyncio.sleep(max(1.0, self.settings.writer_ack_wait_s / 3))
            for i in list(pending):
                await _quiet(msgs[i].in_progress())


async def _quiet(coro: Any) -> None:
    try:
        await coro
    except (NatsError, OSError) as exc:
        log.debug("ack/nak not sent: %s", exc)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
