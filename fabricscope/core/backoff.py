"""Exponential backoff with jitter: the one rule for "wait longer after each failure, up to a cap".

Used by the batch sender (retries and outage probes) and the switch scheduler (per-device polling).
Jitter keeps a fleet of clients that lost the same service from coming back in lock-step.
Standard library only: the training hook uses it.
"""

from __future__ import annotations

import random
import time


def backoff_delay(failures: int, *, base: float, cap: float, spread: tuple[float, float] = (0.8, 1.2),
                  rng: random.Random | None = None) -> float:
    """Seconds to wait after the ``failures``-th failure in a row: base, 2·base, 4·base ... capped,
    each scaled by a random factor in ``spread``. No wait before the first failure."""
    if failures <= 0:
        return 0.0
    raw = min(cap, base * 2 ** (failures - 1))
    return raw * (rng or random).uniform(*spread)  # noqa: S311 - jitter, not security


class Backoff:
    """Failure bookkeeping for one peer: when it may be tried again; one success resets it."""

    def __init__(self, base: float, cap: float = 300.0, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = max(cap, base)
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which the peer is left alone
        self._rng = rng or random.Random()

    def delay(self) -> float:
        return backoff_delay(max(1, self.failures), base=self.base, cap=self.cap, rng=self._rng)

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


__all__ = ["Backoff", "backoff_delay"]
