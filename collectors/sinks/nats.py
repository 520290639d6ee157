"""NATS JetStream sink: the ``HttpSender`` interface, publishing batches to the ingest stream.

``NatsSender(url).submit(kind, item, job=...)`` never blocks and never raises; ``flush``, ``close``
and ``stats`` behave as in :class:`collectors.sinks.http.HttpSender`, whose queue, batching,
spool and circuit breaker this class inherits: only the delivery of one batch differs. A batch is
published to ``fabricscope.ingest.<kind>`` with its ``batch_id`` in the body and in
``Nats-Msg-Id``, and counts as sent once JetStream acknowledged storing it. Any failure to get that
acknowledgement (NATS down, stream full, no stream yet because no writer ever ran) is retried with
backoff and then spooled, exactly like an unreachable HTTP service. A batch over the server's
``max_payload`` is split in two, like a 413.

nats-py is asyncio: one private event loop runs in a daemon thread and the sender thread hands it
each publish. Needs ``nats-py`` (not the standard library): the training hook uses it only when
configured to.
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

from fabricscope.collectors.sinks.http import HttpSender, _dumps, _json_ok, _n_items, _request_of
from fabricscope.core.errors import FabricscopeError
from fabricscope.service.bus import codec

log = logging.getLogger("fabricscope.sender")

_MAX_PAUSE_S = 30.0


def _redact(url: str) -> str:
    from fabricscope.service.bus.stream import redact

    return redact(url)


class _TooLarge(FabricscopeError):
    pass


class NatsSender(HttpSender):
    def __init__(
        self,
        url: str = "nats://127.0.0.1:4222",
        *,
        spool_path: str | Path | None = None,
        spool_max_bytes: int = 64 << 20,
        queue_max: int = 100_000,
        batch_max: int = 5000,
        flush_interval_s: float = 1.0,
        timeout_s: float = 5.0,
        max_retries: int = 3,
        name: str = "fabricscope-sender",
    ) -> None:
        # Set up before the base class starts its thread, which may deliver at once.
        self._nats_url = url
        self._client_name = name
        self._nc: Any = None
        self._js: Any = None
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="fabricscope-nats", daemon=True)
        self._loop_thread.start()
        super().__init__("http://unused.invalid", spool_path=spool_path, spool_max_bytes=spool_max_bytes,
                         queue_max=queue_max, batch_max=batch_max, flush_interval_s=flush_interval_s,
                         timeout_s=timeout_s, max_retries=max_retries)

    def __repr__(self) -> str:
        return f"NatsSender({_redact(self._nats_url)!r})"

    def close(self, timeout_s: float = 5.0) -> None:
        super().close(timeout_s)
        if self._loop.is_closed() or self._forked:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._disconnect(), self._loop).result(timeout=2)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(2)

    # -- asyncio side (the private loop) ------------------------------------------------------------
    async def _publish(self, subj: str, data: bytes, headers: dict[str, str]) -> None:
        if self._nc is None or self._nc.is_closed:
            # Connect once; later outages are handled by the client's own reconnect.
            self._nc = await nats.connect(servers=[u.strip() for u in self._nats_url.split(",") if u.strip()],
                                          name=self._client_name, max_reconnect_attempts=-1,
                                          reconnect_time_wait=0.5, connect_timeout=2,
                                          error_cb=self._quiet, allow_reconnect=True)
            self._js = self._nc.jetstream(timeout=self._timeout)
        if len(data) > self._nc.max_payload:
            raise _TooLarge()
        await self._js.publish(subj, data, headers=headers, timeout=self._timeout)

    async def _quiet(self, exc: Exception) -> None:
        log.debug("fabricscope nats: %s", exc)

    async def _disconnect(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    # -- one batch (sender thread) ------------------------------------------------------------------
    def _deliver(self, rec: dict[str, Any], retries: int | None = None) -> str:
        """'ok', 'rejected' (not JSON: dropped and counted) or 'failed' (retries ran out)."""
        try:
            kind, body = _message_of(rec)
            _dumps(body)  # NaN/inf are not JSON: find the offending items before encoding
        except ValueError:
            if "items" not in rec:
                self._count_drop("rejected", 1)
                return "rejected"
            good = [it for it in rec["items"] if _json_ok(it)]
            self._count_drop("rejected", len(rec["items"]) - len(good))
            log.warning("fabricscope: %s: %d items with NaN/inf dropped", rec["kind"], len(rec["items"]) - len(good))
            rec["items"][:] = good
            if not good:
                return "rejected"
            kind, body = _message_of(rec)
        subj, data, headers = codec.encode(kind, body)
        max_retries = self._max_retries if retries is None else retries
        attempt = 0
        while True:
            fut = asyncio.run_coroutine_threadsafe(self._publish(subj, data, headers), self._loop)
            try:
                fut.result(timeout=self._timeout + 3)
                self._stats["sent"] += _n_items(rec)
                self._stats["sent_batches"] += 1
                return "ok"
            except _TooLarge:
                if len(rec.get("items") or ()) > 1:
                    self._stats["split_batches"] += 1
                    half = len(rec["items"]) // 2
                    parts = [dict(rec, items=rec["items"][:half], batch_id=f"{rec['batch_id']}.0"),
                             dict(rec, items=rec["items"][half:], batch_id=f"{rec['batch_id']}.1")]
                    results = [self._deliver(p, retries) for p in parts]
                    return "failed" if "failed" in results else "ok"
                self._stats["rejected_batches"] += 1
                self._count_drop("rejected", _n_items(rec))
                log.warning("fabricscope: one %s item is over the NATS max_payload; dropped", rec["kind"])
                return "rejected"
            except (NatsError, OSError, TimeoutError) as exc:
                fut.cancel()
                log.debug("fabricscope nats publish failed: %s: %s", type(exc).__name__, exc)
            if attempt >= max_retries:
                self._stats["failed_batches"] += 1
                return "failed"
            pause = min(_MAX_PAUSE_S, 0.25 * 2**attempt)
            attempt += 1
            self._stats["retries"] += 1
            if self._stop.wait(pause):
                self._stats["failed_batches"] += 1
                return "failed"


def is_nats_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in ("nats", "tls", "ws", "wss")


def sender_for(url: str, *, token: str | None = None, **kwargs: Any) -> HttpSender:
    """The sink a configured URL asks for: ``nats://host:4222[,nats://...]`` publishes to JetStream,
    ``http(s)://`` posts to the API. Same interface either way, so collectors need one line."""
    if is_nats_url(url):
        return NatsSender(url, **kwargs)  # credentials, if any, are in the URL (user:password@)
    return HttpSender(url, token=token, **kwargs)


def _message_of(rec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, docs/API.md body) of a queued batch: the same body the HTTP sender would POST."""
    if rec["kind"] == "job":
        return "jobs", {"job": rec["job"], "batch_id": rec["batch_id"], **rec["body"]}
    _method, _path, body = _request_of(rec)
    return rec["kind"], body


__all__ = ["NatsSender", "is_nats_url", "sender_for"]
