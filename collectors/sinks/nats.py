"""NATS JetStream transport: each batch published to ``fabricscope.ingest.<kind>``.

The batch id travels in the body and in ``Nats-Msg-Id`` (JetStream drops a re-published copy), and
a batch counts as sent once JetStream acknowledged storing it. Any failure to get that
acknowledgement (NATS down, stream full, no stream yet because no writer ever ran) is ``retry``,
exactly like an unreachable HTTP service; a batch over the server's ``max_payload`` is ``too_large``.
Job registrations go to ``fabricscope.ingest.jobs`` as ``{"job", "batch_id", **placement}``.

nats-py is asyncio: one private event loop runs in a daemon thread and the sender thread hands it
each publish. Needs ``nats-py`` (the ``[nats]`` extra), imported only when a nats:// URL is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

import nats
from nats.errors import Error as NatsError

from fabricscope.collectors.sinks.sender import Sender
from fabricscope.core import wire
from fabricscope.core.errors import FabricscopeError
from fabricscope.core.redact import redact_url
from fabricscope.core.transport import OK, Batch, Outcome

log = logging.getLogger("fabricscope.sender")


class _TooLarge(FabricscopeError):
    pass


class NatsTransport:
    def __init__(self, url: str = "nats://127.0.0.1:4222", *, timeout_s: float = 5.0,
                 name: str = "fabricscope-sender") -> None:
        self._url = url
        self._client_name = name
        self.timeout_s = timeout_s
        self._nc: Any = None
        self._js: Any = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="fabricscope-nats", daemon=True)
        self._loop_thread.start()

    def __repr__(self) -> str:  # credentials, if any, are in the URL: never shown
        return f"NatsTransport({redact_url(self._url)!r})"

    def send(self, batch: Batch) -> Outcome:
        if batch.kind == "job":
            kind, text = "jobs", wire.dumps({"job": batch.job, "batch_id": batch.batch_id, **batch.body})
        else:
            kind, text = batch.kind, batch.text
        data, gzipped = wire.gzip_if_large(text.encode())
        headers = {wire.MSG_ID: f"{kind}:{batch.batch_id}"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        fut = asyncio.run_coroutine_threadsafe(self._publish(f"{wire.SUBJECT_PREFIX}.{kind}", data, headers),
                                               self._loop)
        try:
            fut.result(timeout=self.timeout_s + 3)
            return OK
        except _TooLarge:
            return Outcome("too_large", f"{len(data)} bytes is over the NATS max_payload")
        except (NatsError, OSError, TimeoutError) as exc:
            fut.cancel()
            log.debug("fabricscope nats publish failed: %s: %s", type(exc).__name__, exc)
            return Outcome("retry", f"NATS publish: {type(exc).__name__}")

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._disconnect(), self._loop).result(timeout=2)
        except (NatsError, OSError, TimeoutError) as exc:
            log.debug("fabricscope nats close: %s", type(exc).__name__)
        # The client's own tasks (reconnect, subscriptions) must end before the loop stops.
        with contextlib.suppress(TimeoutError):
            asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self._loop).result(timeout=2)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(2)

    # -- asyncio side (the private loop) ------------------------------------------------------------
    async def _publish(self, subj: str, data: bytes, headers: dict[str, str]) -> None:
        if self._nc is None or self._nc.is_closed:
            # Connect once; later outages are handled by the client's own reconnect.
            self._nc = await nats.connect(servers=[u.strip() for u in self._url.split(",") if u.strip()],
                                          name=self._client_name, max_reconnect_attempts=-1,
                                          reconnect_time_wait=0.5, connect_timeout=2,
                                          error_cb=self._quiet, allow_reconnect=True)
            self._js = self._nc.jetstream(timeout=self.timeout_s)
        if len(data) > self._nc.max_payload:
            raise _TooLarge()
        await self._js.publish(subj, data, headers=headers, timeout=self.timeout_s)

    async def _quiet(self, exc: Exception) -> None:
        log.debug("fabricscope nats: %s", exc)

    async def _disconnect(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            with contextlib.suppress(NatsError):
                await self._nc.close()


async def _cancel_other_tasks() -> None:
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


class NatsSender(Sender):
    """A :class:`Sender` over NATS JetStream; what ``make_sink("nats://...")`` builds."""

    def __init__(self, url: str = "nats://127.0.0.1:4222", *, timeout_s: float = 5.0,
                 name: str = "fabricscope-sender", spool_path: str | Path | None = None,
                 spool_max_bytes: int = 64 << 20, queue_max: int = 100_000, batch_max: int = 5000,
                 flush_interval_s: float = 1.0, max_retries: int = 3) -> None:
        super().__init__(NatsTransport(url, timeout_s=timeout_s, name=name), spool_path=spool_path,
                         spool_max_bytes=spool_max_bytes, queue_max=queue_max, batch_max=batch_max,
                         flush_interval_s=flush_interval_s, max_retries=max_retries)


__all__ = ["NatsSender", "NatsTransport"]
