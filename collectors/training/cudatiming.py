"""CUDA timing of wrapped collectives at native cost: pooled event pairs, a tuple ring, stream order.

The training thread does three things per CUDA collective: take a pair of timing events from its
device's free list, record them on the current stream around the call, and leave one tuple in a
preallocated ring. The resolver thread (the timer's, every 0.1 s) moves the tuples into one queue per
stream, asks each stream's oldest op whether its end event has completed (work on one stream
completes in the order it was recorded, so a later op cannot be done before an earlier one), builds
the records in that order, and gives the events back to the free list once ``elapsed_time`` is read.

- Creating a CUDA event costs about 2.5 µs, re-recording a pooled one about 0.1 µs (PyTorch's own
  measurement). A device's pool holds at most ``PAIRS_MAX`` pairs, all of them in flight at worst: a
  pool that runs dry leaves the op untimed (its ``seq`` is still taken, nothing is posted) and counts
  it in ``untimed``; the training thread never waits for a pair, and never makes more.
- Ops whose stream is unknown (no ``torch.cuda.current_stream``) share one queue, resolved in the
  order they were issued and stopping at the first not done, as before pooling.

torch is reached only through the timer (imported by its ``install``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from typing import Any

PAIRS_MAX = 16384  # event pairs per device: the ops it may have in flight (issued, not yet resolved)
RING = 1 << 16
_STREAMS_KEPT = 64
_UNSET = object()
DRY = ("dry",)  # the token of an op that found its device's pool dry: not timed


class EventPool:
    """Per-device free lists of ``(start, end)`` timing event pairs, at most ``cap`` pairs each."""

    def __init__(self, make: Any, cap: int = PAIRS_MAX) -> None:
        self._make, self.cap = make, cap
        self._free: dict[int | None, list[tuple[Any, Any]]] = {}
        self.made: dict[int | None, int] = {}
        self.dry = 0
        self._lock = threading.Lock()  # only when a pair is made (warm-up), never on reuse

    def take(self, dev: int | None) -> tuple[Any, Any] | None:
        free = self._free.get(dev)
        if free:
            try:
                return free.pop()  # atomic under the GIL: the resolver appends concurrently
            except IndexError:
                pass
        with self._lock:
            n = self.made.get(dev, 0)
            if n >= self.cap:
                self.dry += 1
                return None
            pair = (self._make(), self._make())
            self.made[dev] = n + 1
            self._free.setdefault(dev, [])
            return pair

    def give(self, dev: int | None, pair: tuple[Any, Any]) -> None:
        free = self._free.get(dev)
        if free is None:
            free = self._free.setdefault(dev, [])
        free.append(pair)

    @property
    def events_created(self) -> int:
        return 2 * sum(self.made.values())


class CudaTiming:
    """The CUDA half of :class:`~fabricscope.collectors.training.collectives.CollectiveTimer`."""

    def __init__(self, timer: Any, cap: int = PAIRS_MAX, ring: int = RING) -> None:
        self.timer = timer
        self.pool = EventPool(lambda: timer.torch.cuda.Event(enable_timing=True), cap)
        self._size = ring
        self._ring: list[tuple[Any, ...] | None] = [None] * ring
        self._ticket = itertools.count()
        self._read = 0
        self._issued = 0  # tickets handed out (the last one + 1)
        self._skipped: set[int] = set()
        self._current: Any = _UNSET  # torch.cuda.current_stream, or None where there is none
        self._streams: dict[Any, deque[tuple[Any, ...]]] = {}  # stream (None: unknown) -> ops, oldest first
        self._lock = threading.Lock()  # resolve() from the resolver thread, flush() and close()
        self.ring_dropped = 0
        self.queries = 0  # end-event queries made: at most one that answers "not done" per stream per tick

    @property
    def untimed(self) -> int:
        return self.pool.dry

    def pending(self) -> int:
        return sum(len(q) for q in self._streams.values()) + self._issued - self._read

    def _stream(self) -> Any:
        current = self._current
        if current is _UNSET:  # looked up once: torch is the timer's, imported by its install()
            current = self._current = getattr(self.timer.torch.cuda, "current_stream", None)
        return current() if current is not None else None

    def start(self) -> Any:
        """On the training thread, before the call: ``(stream, device, pair)``, or ``DRY``."""
        s = self._stream()
        dev = s.device_index if s is not None else None
        free = self.pool._free.get(dev)
        try:
            pair = free.pop()  # type: ignore[union-attr]  # the common case, inline: one call less
        except (AttributeError, IndexError):
            pair = self.pool.take(dev)
            if pair is None:
                return DRY
        try:
            pair[0].record(s)
        except Exception:
            self.pool.give(dev, pair)
            raise
        return (s, dev, pair)

    def end(self, token: tuple[Any, Any, Any], fields: tuple[Any, ...], waited: bool = False) -> None:
        """On the training thread, after the call (an async op: after ``wait()``, on the stream that
        waited). ``fields``: op, seq, bytes, group, group size, step, issue wall time."""
        s, dev, pair = token
        try:
            if waited and s is not None:
                s = self._stream()
            pair[1].record(s)
        except Exception:
            self.pool.give(dev, pair)  # not lost to the pool; the caller counts the error
            raise
        n = next(self._ticket)
        self._issued = n + 1
        if self._ring[n % self._size] is None:
            self._ring[n % self._size] = (n, s, dev, pair, fields)
        else:  # the resolver is a whole ring behind: this op is not recorded
            self._skipped.add(n)
            self.ring_dropped += 1
            self.timer.rec._count_drop(1)
            self.pool.give(dev, pair)

    def resolve(self) -> int:
        """Post every op whose end event has completed, per stream in issue order."""
        with self._lock:
            self._take_ring()
            n = 0
            for q in self._streams.values():
                n += self._resolve_stream(q)
            if len(self._streams) > _STREAMS_KEPT:  # streams made and dropped by the job: forget the idle
                for s in [s for s, q in self._streams.items() if not q]:
                    del self._streams[s]
        return n

    def _take_ring(self) -> None:
        ring, r, size = self._ring, self._read, self._size
        while True:
            e = ring[r % size]
            if e is None or e[0] != r:
                if r in self._skipped:
                    self._skipped.discard(r)
                    r += 1
                    continue
                break  # not written yet
            ring[r % size] = None
            r += 1
            q = self._streams.get(e[1])
            if q is None:
                q = self._streams[e[1]] = deque()
            q.append(e)
        self._read = r

    def _resolve_stream(self, q: deque[tuple[Any, ...]]) -> int:
        n = 0
        while q:
            _, _s, dev, pair, fields = q[0]
            try:
                self.queries += 1
                if not pair[1].query():
                    break  # everything behind it on this stream is later still
                self._post(pair, fields)
            except Exception:
                self.timer.errors += 1
            q.popleft()
            self.pool.give(dev, pair)  # both events completed (or failed): safe to record again
            n += 1
        return n

    def _post(self, pair: tuple[Any, Any], fields: tuple[Any, ...]) -> None:
        start, end = pair
        op, seq, size, group, group_size, step, issued = fields
        dur = start.elapsed_time(end) / 1000.0
        anchor = self.timer._anchor
        if anchor is not None:
            ev, wall = anchor
            t0 = wall + ev.elapsed_time(start) / 1000.0
        else:  # no anchor: the CPU issue time stands in for the GPU start
            t0 = issued if issued is not None else time.time()
        rec = self.timer.rec
        m = rec._collective_meta(op, seq, size, group, group_size)
        m.pop("step", None)
        if step is not None:
            m["step"] = step
        m["start"], m["end"] = t0, t0 + dur
        self.timer.recorded += 1
        rec._submit("collectives", m)
