"""Admission of every read by its cost (#46): two gates, weighed in shares, that every GET route passes.

A unit is one expensive read (a report, steps list, efficiency, trends, fleet ranking, comparison)
and is SHARES shares. A read of one row or a few by their key costs one share; a list costs a share
per ROWS_PER_SHARE rows it may answer (its ``limit``, or for the lists without one the rows its
last answer had); a metric read over many series a unit per SERIES_PER_UNIT series (it runs one
query per series). Every read is counted, the cheapest too: a flood of cheap reads otherwise took
every connection of the pool and ingest queued behind it.

At most ``capacity`` units run at once, so the rest of the database pool stays free for ingest; a
client (peer address) holds at most ``per_client`` units, and asking for more is refused at once
rather than queued, so one client cannot fill the gate or the waiting threads.

The cheap reads (one share: a read by its key, a short list, a metric of a few series) pass a gate
of their own (ReadGates), with an allowance per client apart from its expensive reads: a client
running its two reports still gets its dashboard's lookups, and a flood of lookups does not take
its reports' room (#46). Both gates together hold at most max_heavy_reads x SHARES / 2 (the
costliest-but-one read is two shares) plus max_cheap_reads connections of the pool: 8 + 8 of 20 by
default, the rest for ingest.
"""

from __future__ import annotations

import enum
import math
import threading
from collections import Counter

# A unit in shares: the cheapest read is a quarter of an expensive one, so the 4 units by default
# admit at most 16 reads at once (of the pool's 20 connections) and one client's 2 units 8.
SHARES = 4
CHEAP = 1
# A list's rows per share: the longest lists (limit 1,000) cost a unit, as an expensive read does.
ROWS_PER_SHARE = 250
# A metric read over this many series or fewer costs one share; over it a unit per SERIES_PER_UNIT.
FREE_SERIES = 64
SERIES_PER_UNIT = 500


def series_cost(n: int) -> int:
    """Shares for a read of ``n`` series: one up to FREE_SERIES, then a unit per SERIES_PER_UNIT begun."""
    return CHEAP if n <= FREE_SERIES else SHARES * math.ceil(n / SERIES_PER_UNIT)


def rows_cost(rows: int) -> int:
    """Shares for a list of up to ``rows`` rows: one per ROWS_PER_SHARE begun, one at least."""
    return max(CHEAP, math.ceil(rows / ROWS_PER_SHARE))


class Refusal(enum.Enum):
    CLIENT = "client"  # the client already holds its share: refused at once
    FULL = "full"  # the gate stayed full for the whole wait


class CostGate:
    """``capacity`` and ``per_client`` in units of ``shares`` shares (the settings'); costs in shares."""

    def __init__(self, capacity: int, per_client: int, *, shares: int = SHARES) -> None:
        self.capacity, self.per_client = capacity * shares, per_client * shares
        self._cond = threading.Condition()
        self._used = 0
        self._held: Counter[str] = Counter()
        # Rows of the last answer of each list without a limit, by a key its route names: what the
        # next one is charged. Keys are fixed per route, so this stays a few entries.
        self._rows: dict[str, int] = {}

    def _cap(self, cost: int) -> int:
        # A read costlier than the whole gate runs alone rather than never.
        return max(1, min(cost, self.capacity))

    def _client_fits(self, peer: str, cost: int) -> bool:
        # A client holding nothing may always run one read, whatever its cost.
        return self._held[peer] == 0 or self._held[peer] + cost <= self.per_client

    def acquire(self, *, cost: int, peer: str, timeout_s: float) -> Refusal | None:
        """Take ``cost`` shares for ``peer`` within ``timeout_s``; None when taken, else why not."""
        cost = self._cap(cost)
        with self._cond:
            if not self._client_fits(peer, cost):
                return Refusal.CLIENT
            if not self._cond.wait_for(lambda: self._used + cost <= self.capacity and self._client_fits(peer, cost),
                                       timeout_s):
                # The wait can end on the client's own share too (its other reads took it meanwhile).
                return Refusal.FULL if self._client_fits(peer, cost) else Refusal.CLIENT
            self._used += cost
            self._held[peer] += cost
            return None

    def release(self, *, cost: int, peer: str) -> None:
        cost = self._cap(cost)
        with self._cond:
            self._used -= cost
            self._held[peer] -= cost
            if self._held[peer] <= 0:
                del self._held[peer]
            self._cond.notify_all()

    def in_use(self) -> int:
        """Shares held now."""
        with self._cond:
            return self._used

    def held_by(self, peer: str) -> int:
        with self._cond:
            return self._held[peer]

    def learned_cost(self, key: str) -> int:
        """Shares for a list without a limit: by its last answer's rows (one share before any)."""
        with self._cond:
            return rows_cost(self._rows.get(key, 0))

    def learn(self, key: str, rows: int) -> None:
        with self._cond:
            self._rows[key] = rows


class ReadGates:
    """The expensive reads' gate (in units) and the cheap reads' (in reads of one share), and the learned
    sizes of the lists without a limit. A read goes to the cheap gate when it costs one share."""

    def __init__(self, *, heavy: int, heavy_per_client: int, cheap: int, cheap_per_client: int) -> None:
        self.heavy = CostGate(heavy, heavy_per_client)
        self.cheap = CostGate(cheap, cheap_per_client, shares=CHEAP)

    def gate_for(self, cost: int) -> CostGate:
        return self.cheap if cost <= CHEAP else self.heavy

    def learned_cost(self, key: str) -> int:
        return self.heavy.learned_cost(key)

    def learn(self, key: str, rows: int) -> None:
        self.heavy.learn(key, rows)
