"""A bounded, thread-safe LRU map with an optional time-to-live.

The engine is shared by the scheduler thread and the request threads: every read and write goes
under one lock, and a full map drops its least recently used entry, so memory stays bounded however
many jobs a long-running service sees.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING = object()


class LruCache(Generic[K, V]):
    """`max_size` entries at most; with `ttl_s`, an entry older than that reads as absent."""

    def __init__(
        self, *, max_size: int, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.max_size = max_size
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return cast("V | None", self._get(key, default))

    def get_many(self, keys: list[K]) -> dict[K, V]:
        """The present entries among `keys`, under one acquisition of the lock."""
        with self._lock:
            found = {k: self._get(k, _MISSING) for k in keys}
        return {k: v for k, v in found.items() if v is not _MISSING}  # type: ignore[misc]

    def _get(self, key: K, default: object) -> object:
        hit = self._data.get(key)
        if hit is None:
            return default
        if self.ttl_s is not None and self._clock() - hit[0] >= self.ttl_s:
            del self._data[key]
            return default
        self._data.move_to_end(key)
        return hit[1]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = (self._clock(), value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_size:
                self._data.popitem(last=False)

    def update(self, items: dict[K, V]) -> None:
        """Several entries under one acquisition of the lock."""
        with self._lock:
            now = self._clock()
            for key, value in items.items():
                self._data[key] = (now, value)
                self._data.move_to_end(key)
            while len(self._data) > self.max_size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data
