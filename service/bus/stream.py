"""Connecting to NATS and declaring the JetStream objects fabricscope uses (idempotent).

* ``FABRICSCOPE_INGEST`` (name from settings): subjects ``fabricscope.ingest.*``, file storage,
  work-queue retention (a message is gone once a writer acknowledged it: the database is the store,
  the stream only the buffer), ``discard=new`` when full (publishers are refused and spool; nothing
  already accepted is ever discarded), a ``Nats-Msg-Id`` duplicate window.
* ``<stream>_REJECTED``: batches a writer refused as bad input, with the reason, kept for a week.
* one durable pull consumer shared by all writers: explicit acks, bounded ``max_ack_pending``.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as jsapi
from nats.js.errors import BadRequestError, NotFoundError

from fabricscope.service.bus import codec
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.bus")


def servers(url: str) -> list[str]:
    return [u.strip() for u in url.split(",") if u.strip()]


def redact(url: str) -> str:
    out = []
    for u in servers(url):
        p = urllib.parse.urlsplit(u)
        host = p.hostname or ""
        out.append(f"{p.scheme}://{host}:{p.port}" if p.port else f"{p.scheme}://{host}")
    return ",".join(out)


async def connect(url: str, *, name: str, reconnect: bool = True, **callbacks: Any) -> Client:
    """A client that reconnects forever (a NATS restart is an ordinary event, not a crash)."""

    async def _error(exc: Exception) -> None:
        log.debug("nats %s: %s: %s", name, type(exc).__name__, exc)

    async def _disconnected() -> None:
        log.warning("nats %s: disconnected from %s", name, redact(url))

    async def _reconnected() -> None:
        log.warning("nats %s: reconnected to %s", name, redact(url))

    cbs: dict[str, Any] = {"error_cb": _error, "disconnected_cb": _disconnected, "reconnected_cb": _reconnected}
    cbs.update(callbacks)
    return await nats.connect(servers=servers(url), name=name, allow_reconnect=reconnect,
                              max_reconnect_attempts=-1 if reconnect else 0, reconnect_time_wait=0.5,
                              connect_timeout=2, **cbs)


def dead_stream(settings: Settings) -> str:
    return f"{settings.nats_stream}_REJECTED"


async def ensure_streams(js: JetStreamContext, settings: Settings) -> None:
    cfg = jsapi.StreamConfig(
        name=settings.nats_stream,
        description="fabricscope ingest batches not yet written to the database",
        subjects=[f"{codec.PREFIX}.*"],
        retention=jsapi.RetentionPolicy.WORK_QUEUE,
        storage=jsapi.StorageType.FILE,
        discard=jsapi.DiscardPolicy.NEW,
        max_bytes=settings.nats_max_bytes,
        max_age=settings.nats_max_age_s,
        num_replicas=settings.nats_replicas,
        duplicate_window=settings.nats_dedupe_window_s,
    )
    dead = jsapi.StreamConfig(
        name=dead_stream(settings),
        description="fabricscope ingest batches refused by a writer (bad input), with the reason",
        subjects=[f"{codec.DEAD_PREFIX}.*"],
        retention=jsapi.RetentionPolicy.LIMITS,
        storage=jsapi.StorageType.FILE,
        discard=jsapi.DiscardPolicy.OLD,
        max_bytes=min(settings.nats_max_bytes, 1 << 30),
        max_age=7 * 86_400.0,
        num_replicas=settings.nats_replicas,
    )
    for c in (cfg, dead):
        try:
            await js.stream_info(c.name or "")
            await js.update_stream(c)  # limits may have changed in the settings
        except NotFoundError:
            await js.add_stream(c)
            log.info("created JetStream stream %s", c.name)
        except BadRequestError as exc:  # e.g. retention cannot change: keep the existing stream
            log.warning("stream %s kept as it is: %s", c.name, exc)


def consumer_config(settings: Settings) -> jsapi.ConsumerConfig:
    return jsapi.ConsumerConfig(
        name=settings.nats_consumer,
        durable_name=settings.nats_consumer,
        description="fabricscope writers (one consumer, N processes)",
        ack_policy=jsapi.AckPolicy.EXPLICIT,
        ack_wait=settings.writer_ack_wait_s,
        max_ack_pending=settings.writer_max_ack_pending,
        max_deliver=-1,  # a batch is retried until written (database outages); bad input is terminated
        filter_subject=f"{codec.PREFIX}.*",
        max_waiting=512,
    )


async def ensure_consumer(js: JetStreamContext, settings: Settings) -> JetStreamContext.PullSubscription:
    cfg = consumer_config(settings)
    try:
        await js.consumer_info(settings.nats_stream, settings.nats_consumer)
    except NotFoundError:
        try:
            await js.add_consumer(settings.nats_stream, cfg)
        except BadRequestError as exc:  # another writer created it a moment ago
            log.debug("consumer create race: %s", exc)
    return await js.pull_subscribe_bind(durable=settings.nats_consumer, stream=settings.nats_stream)
