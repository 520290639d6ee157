"""Per-device exponential backoff: an unreachable device is retried less and less often (up to a
cap) with jitter so a rack that comes back is not polled in lock-step; one success resets it."""

from __future__ import annotations

import random
import time


class Backoff:
    def __init__(self, base: float, cap: float = 300.0, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = max(cap, base)
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which polls are skipped
        self._rng = rng or random.Random()

    def delay(self) -> float:
        raw = min(self.cap, self.base * 2 ** max(0, self.failures - 1))
        return raw * self._rng.uniform(0.8, 1.2)

    def failed(self, at: float | None = None) -> float:
        self.failures += 1
        d = self.delay()
        self.not_before = (time.monotonic() if at is None else at) + d
        return d

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = 0.0

    def ready(self, at: float | None = None) -> bool:
        return (time.monotonic() if at is None else at) >= self.not_before
