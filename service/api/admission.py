"""Admission of the reads by their cost (#46): one gate for the expensive reads, weighed in units.

A report, steps list, efficiency or trends read costs one unit; a metric read over many series
costs a unit per SERIES_PER_UNIT series (it runs one query per series). At most ``capacity`` units
run at once, so the rest of the database pool stays free for ingest and the cheap reads; a client
(peer address) holds at most ``per_client`` units, and asking for more is refused at once rather
than queued, so one client cannot fill the gate or the waiting threads.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

# A metric read over this many series or fewer is cheap: it is not admitted here.
FREE_SERIES = 64
SERIES_PER_UNIT = 500


def series_cost(n: int) -> int:
    """Units for a read of ``n`` series: 0 up to FREE_SERIES, then one per SERIES_PER_UNIT begun."""
    return 0 if n <= FREE_SERIES else math.ceil(n / SERIES_PER_UNIT)


class CostGate:
    def __init__(self, capacity: int, per_client: int) -> None:
        self.capacity, self.per_client = capacity, per_client
        self._cond = threading.Condition()
        self._used = 0
        self._held: Counter[str] = Counter()

    def _cap(self, cost: int) -> int:
        # A read costlier than the whole gate runs alone rather than never.
        return max(1, min(cost, self.capacity))

    def _client_fits(self, peer: str, cost: int) -> bool:
        # A client holding nothing may always run one read, whatever its cost.
        return self._held[peer] == 0 or self._held[peer] + cost <= self.per_client

    def acquire(self, *, cost: int, peer: str, timeout_s: float) -> bool:
        """Take ``cost`` units for ``peer`` within ``timeout_s``; False when refused (over the client's
        share at once, or no room in time)."""
        cost = self._cap(cost)
        with self._cond:
            if not self._client_fits(peer, cost):
                return False
            if not self._cond.wait_for(lambda: self._used + cost <= self.capacity and self._client_fits(peer, cost),
                                       timeout_s):
                return False
            self._used += cost
            self._held[peer] += cost
            return True

    def release(self, *, cost: int, peer: str) -> None:
        cost = self._cap(cost)
        with self._cond:
            self._used -= cost
            self._held[peer] -= cost
            if self._held[peer] <= 0:
                del self._held[peer]
            self._cond.notify_all()

    def in_use(self) -> int:
        with self._cond:
            return self._used
