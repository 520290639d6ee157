"""The one batching, spooling sender, on top of any :class:`Transport` (HTTP, NATS, the database).

The caller's side is a bounded deque: ``submit`` appends and returns, it never blocks, never raises;
a full queue drops and counts. A daemon thread drains the queue every ``flush_interval_s`` (or as
soon as ``batch_max`` items wait), groups items per kind and job into batches with a fresh
``batch_id`` (the service ignores a batch id it has seen, so retries are idempotent), drops items
that are not strict JSON (NaN/inf) and hands each batch to the transport. Its answer decides:
``rejected`` drops and counts that batch only (the server's reason logged) and the rest flows on;
when it names the bad items (docs/API.md), only those are dropped and the rest is sent again at
once under the same batch id (a refused batch stores nothing); ``too_large`` halves the batch;
``retry`` is retried with backoff (a Retry-After honoured) and, when retries run out, the batch
goes to the spool and from then on new batches go behind it (order is kept) until a replay of the
oldest spooled batch succeeds; the service is probed again with growing pauses, not hammered.

Standard library only: the training hook runs it inside training processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fabricscope.collectors.sinks.batches import drop_items, encode, group, n_items
from fabricscope.collectors.sinks.spool import Spool
from fabricscope.core import wire
from fabricscope.core.backoff import backoff_delay
from fabricscope.core.transport import Transport

log = logging.getLogger("fabricscope.sender")

KINDS = wire.KINDS
_MAX_PAUSE_S = 30.0
_STATS = ("sent", "dropped", "dropped_queue_full", "dropped_spool_full", "rejected", "spooled", "replayed",
          "retries", "failed_batches", "rejected_batches", "split_batches", "sent_batches", "spool_corrupt",
          "partial_batches")

_live: weakref.WeakSet[Sender] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The sender thread does not survive fork (DataLoader workers): a child must neither queue
    # into a dead thread nor flush the parent's items twice.
    for s in list(_live):
        s._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


class Sink(Protocol):
    """Where collectors put what they measured; :func:`~fabricscope.collectors.sinks.factory.make_sink`."""

    def submit(self, kind: str, item: dict[str, Any], *, job: str | None = None) -> bool: ...
    def put_job(self, job: str, body: dict[str, Any]) -> None: ...
    def flush(self, timeout_s: float | None = None) -> bool: ...
    def close(self, timeout_s: float = 5.0) -> None: ...
    @property
    def stats(self) -> dict[str, int]: ...


class Sender:
    def __init__(self, transport: Transport, *, spool_path: str | Path | None = None,
                 spool_max_bytes: int = 64 << 20, queue_max: int = 100_000, batch_max: int = 5000,
                 flush_interval_s: float = 1.0, max_retries: int = 3, name: str = "fabricscope-sender") -> None:
        self._transport = transport
        self._queue_max = queue_max
        self._batch_max = max(1, batch_max)
        self._interval = flush_interval_s
        self._max_retries = max(0, max_retries)
        self._q: deque[tuple[str, str | None, dict[str, Any]]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()  # interrupts backoff sleeps at close
        self._cv = threading.Condition()
        self._busy = self._closing = self._closed = self._forked = False
        self._abandon = False  # close() timed out: spool what is left, send nothing more
        self._flush_req = self._flush_done = 0
        self._drop_lock = threading.Lock()
        self._down = False  # circuit open: new batches go to the spool behind the old ones
        self._next_probe = 0.0
        self._force = False
        self._probe_failures = 0
        self._stats = dict.fromkeys(_STATS, 0)
        self._tick_hooks: list[Callable[[], None]] = []
        self._spool: Spool | None = None
        if spool_path is not None:
            try:
                self._spool = Spool(spool_path, spool_max_bytes)
            except OSError as e:
                log.warning("fabricscope: no spool (%s); batches that cannot be sent will be dropped", e)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _live.add(self)

    def __repr__(self) -> str:  # the transport's repr never shows a secret
        return f"{type(self).__name__}({self._transport!r})"

    @property
    def transport(self) -> Transport:
        return self._transport

    # -- caller side (any thread; cheap, never raises) ----------------------------------------------
    def submit(self, kind: str, item: dict[str, Any], *, job: str | None = None) -> bool:
        try:
            if self._closing or self._forked or kind not in KINDS or len(self._q) >= self._queue_max:
                self._count_drop("dropped_queue_full", 1)
                return False
            self._q.append((kind, job, item))
            if len(self._q) >= self._batch_max:
                self._wake.set()
            return True
        except Exception:  # pragma: no cover - defensive: nothing may reach the training loop
            return False

    def put_job(self, job: str, body: dict[str, Any]) -> None:
        try:
            if self._closing or self._forked or len(self._q) >= self._queue_max:
                self._count_drop("dropped_queue_full", 1)
                return
            self._q.append(("job", job, body))
        except Exception:  # pragma: no cover - defensive: nothing may reach the training loop
            pass

    def on_tick(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the sender thread before each send cycle (every ``flush_interval_s``, and at each
        flush and close): work a caller must keep off its own thread (the hook's bounded detail)."""
        self._tick_hooks.append(fn)

    def _count_drop(self, why: str, n: int) -> None:
        with self._drop_lock:
            self._stats[why] += n
            self._stats["dropped"] += n

    @property
    def stats(self) -> dict[str, int]:
        out = dict(self._stats)
        out["queued"] = len(self._q)
        out["spool_bytes"] = self._spool.pending_bytes if self._spool is not None else 0
        if self._spool is not None:  # an empty spool is falsy: its count of skipped records still holds
            out["spool_corrupt"] = self._spool.corrupt
        return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send everything queued now (and replay the spool). True when all of it reached the
        service and the spool is empty; False on timeout or while the service is away."""
        if self._forked or not self._thread.is_alive():
            return False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            self._flush_req += 1
            target = self._flush_req
            self._wake.set()
            while True:
                if self._flush_done >= target and not self._q and not self._busy:
                    return not self._down and not (self._spool is not None and self._spool)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(0.05 if left is None else min(left, 0.05))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting items, send (or spool) what is queued, release the spool and transport."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if not self._forked:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._abandon = True  # the service is slow: put the rest on disk and stop
                self._stop.set()
                self._wake.set()
                self._thread.join(max(1.0, self._transport.timeout_s + 0.5))
        self._closed = True
        # A forked child shares the parent's flock and sockets: releasing them would break the parent.
        if not self._forked and not self._thread.is_alive():
            if self._spool is not None:
                with contextlib.suppress(OSError):
                    self._spool.close()
            self._transport.close()
        left = len(self._q)
        if left:
            self._count_drop("dropped_queue_full", left)
            log.warning("fabricscope: %d items not sent at close", left)

    # -- sender thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            closing = self._closing
            with self._cv:
                flush_target = self._flush_req
                self._busy = True
            try:
                # A flush or close tries the service now even while it is thought to be away.
                self._force = flush_target != self._flush_done or closing
                for fn in self._tick_hooks:
                    fn()
                self._cycle()
            except Exception:  # pragma: no cover - the thread must outlive any bug
                log.exception("fabricscope sender: unexpected error")
            with self._cv:
                self._busy = False
                self._flush_done = flush_target
                self._cv.notify_all()
            if closing and not self._q:
                return

    def _cycle(self) -> None:
        self._replay()
        while self._q:
            items = [self._q.popleft() for _ in range(min(self._batch_max, len(self._q)))]
            for rec in group(items):
                self._dispatch(rec)

    def _dispatch(self, rec: dict[str, Any]) -> None:
        if self._abandon or (self._spool is not None and self._spool):
            self._to_spool(rec)  # behind what is already spooled, so order is kept
        elif self._down and not self._force and time.monotonic() < self._next_probe:
            self._to_spool(rec)
        elif self._deliver(rec, retries=0 if self._down else None) == "failed":
            self._open_circuit()
            self._to_spool(rec)
        else:
            self._close_circuit()

    def _replay(self) -> None:
        if self._spool is None or not self._spool or self._abandon:
            return
        if self._down and not self._force and time.monotonic() < self._next_probe:
            return
        while (rec := self._spool.peek()) is not None:
            try:
                result = self._deliver(rec, retries=0 if self._down else None)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                # a record the spool's shape check let through and encode cannot read: one loss,
                # said once, never a loop that holds back everything spooled behind it
                log.warning("fabricscope: spooled batch %.40r skipped: %s: %s", rec.get("batch_id"),
                            type(e).__name__, e)
                self._spool.corrupt += 1
                self._spool.pop()
                continue
            if result == "failed":
                self._open_circuit()
                return
            self._spool.pop()
            if result == "ok":
                self._stats["replayed"] += n_items(rec)
            self._close_circuit()

    def _open_circuit(self) -> None:
        self._force = False  # one forced probe per flush is enough
        if not self._down:
            log.warning("fabricscope: service %r unreachable; spooling", self._transport)
        self._down = True
        self._probe_failures += 1
        pause = backoff_delay(self._probe_failures, base=max(self._interval, 1.0), cap=_MAX_PAUSE_S)
        self._next_probe = time.monotonic() + pause

    def _close_circuit(self) -> None:
        if self._down:
            log.warning("fabricscope: service %r is back", self._transport)
        self._down = False
        self._probe_failures = 0

    def _to_spool(self, rec: dict[str, Any]) -> None:
        n = n_items(rec)
        if self._spool is not None:
            try:
                if self._spool.append(rec):
                    self._stats["spooled"] += n
                    return
            except (OSError, ValueError) as e:
                log.warning("fabricscope: spool write failed: %s", e)
        self._count_drop("dropped_spool_full", n)

    # -- one batch ----------------------------------------------------------------------------------
    def _deliver(self, rec: dict[str, Any], retries: int | None = None) -> str:
        """'ok', 'rejected' (dropped and counted) or 'failed' (retries ran out)."""
        batch, unsendable = encode(rec)
        if unsendable:  # each costs only itself (#46 item 6), and is named
            self._count_drop("rejected", len(unsendable))
            log.warning("fabricscope: %s: %d items the service could not read dropped: %s", rec["kind"],
                        len(unsendable), "; ".join(unsendable[:5])[:500])
        if batch is None:
            return "rejected"
        max_retries = self._max_retries if retries is None else retries
        attempt = 0
        while True:
            out = self._transport.send(batch)
            if out.kind == "ok":
                self._stats["sent"] += n_items(rec)
                self._stats["sent_batches"] += 1
                return "ok"
            if out.kind == "too_large" and len(rec.get("items") or ()) > 1:
                self._stats["split_batches"] += 1
                half = len(rec["items"]) // 2
                parts = [dict(rec, items=rec["items"][:half], batch_id=f"{rec['batch_id']}.0"),
                         dict(rec, items=rec["items"][half:], batch_id=f"{rec['batch_id']}.1")]
                results = [self._deliver(p, retries) for p in parts]
                return "failed" if "failed" in results else "ok"
            bad = drop_items(rec, out.items) if out.kind == "rejected" else 0
            if bad:  # only these items were refused: count them, send the rest again now
                self._stats["partial_batches"] += 1
                self._count_drop("rejected", bad)
                log.warning("fabricscope: %s: %d items rejected by %r and dropped, the other %d sent again: %s",
                            rec["kind"], bad, self._transport, n_items(rec), out.reason[:500])
                batch, _ = encode(rec)
                assert batch is not None  # the items left were strict JSON before
                continue
            if out.kind in ("rejected", "too_large"):
                n = n_items(rec)
                self._stats["rejected_batches"] += 1
                self._count_drop("rejected", n)
                log.warning("fabricscope: %s batch rejected by %r (%d items dropped): %s",
                            rec["kind"], self._transport, n, out.reason[:500])
                return "rejected"
            # A 429 comes from a service that is up and asks for a pause: while spooling, a probe
            # that meets one waits and tries again rather than counting the service as gone (under
            # load the spool would otherwise never drain before the senders close).
            if attempt >= (self._max_retries if out.busy else max_retries):
                self._stats["failed_batches"] += 1
                return "failed"
            attempt += 1
            pause = out.retry_after if out.retry_after is not None else backoff_delay(
                attempt, base=0.25, cap=_MAX_PAUSE_S)
            self._stats["retries"] += 1
            if self._stop.wait(min(pause, _MAX_PAUSE_S)):
                self._stats["failed_batches"] += 1
                return "failed"


__all__ = ["KINDS", "Sender", "Sink"]
