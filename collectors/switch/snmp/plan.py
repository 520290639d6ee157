"""Per-device walk plan: which columns a poll asks for, learned from a full walk of the device.

Every third varbind of a naive poll is wasted on most switches: 32-bit fallback columns (ifInOctets,
ifSpeed, dot3StatsFCSErrors …) that :mod:`.parse` discards because the 64-bit HC column of the same
interface wins, and whole tables the agent does not implement (vendor PFC MIBs, LLDP, dot3HCStats).
So a full walk is done first and then every ``reprobe_every`` polls; in between, a column is left out
when that full walk showed it adds nothing:

* it returned no rows at all, or
* it is a fallback (rank > 0) and for each of its rows a better-ranked set of columns for the same
  metric had that row complete, so parse would have dropped the fallback anyway.

Samples from a planned poll are then the same as from a full one while the device keeps its shape.
When the shape may have changed (the set of interface indexes differs from the full walk's, or the
agent restarted), the next poll is full again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from . import oids
from .oids import Column
from .parse import Value, text

REPROBE_EVERY = 30  # polls; at a 10 s interval a new module's 32-bit-only ports show within 5 min


class WalkPlan:
    def __init__(
        self, columns: Sequence[Column], extra: Iterable[str] = (), reprobe_every: int = REPROBE_EVERY,
        always: Iterable[str] = (),
    ) -> None:
        self.columns = tuple(columns)
        # Walked every poll even when empty: a neighbour cabled after the full walk must show at once
        # (an empty LLDP table costs one endOfMibView per column).
        self.always = frozenset(always)
        self.all = sorted({c.oid for c in self.columns} | set(extra))
        self._known = frozenset(self.all)
        self.reprobe_every = reprobe_every
        self.skipped: frozenset[str] = frozenset()
        self._polls_since_full: int | None = None  # None: no full walk yet, so the next one is full
        self._if_indexes: frozenset[int] = frozenset()

    @property
    def full_due(self) -> bool:
        return self._polls_since_full is None or self._polls_since_full + 1 >= self.reprobe_every

    def next_walk(self) -> tuple[list[str], bool]:
        """Columns for the next poll and whether that is a full walk."""
        if self.full_due:
            return list(self.all), True
        return [c for c in self.all if c not in self.skipped], False

    def _rows(self, varbinds: Iterable[tuple[str, Value]]) -> dict[str, set[str]]:
        rows: dict[str, set[str]] = defaultdict(set)
        known = self._known
        for oid, _ in varbinds:
            head, idx = oid, ""
            for _ in range(4):  # indexes here have 1 (ifIndex) to 3 (LLDP remote) components
                head, _, last = head.rpartition(".")
                idx = f"{last}.{idx}" if idx else last
                if head in known:
                    rows[head].add(idx)
                    break
        return rows

    def observe(self, varbinds: Sequence[tuple[str, Value]], full: bool, restarted: bool = False,
                if_indexes: frozenset[int] = frozenset()) -> None:  # fmt: skip
        """Learn from the poll just done: its varbinds and the ifIndexes it named (parse's if_names)."""
        if not full:
            changed = restarted or if_indexes != self._if_indexes
            self._polls_since_full = None if changed else (self._polls_since_full or 0) + 1
            return
        self._if_indexes = if_indexes
        self._polls_since_full = None if restarted else 0
        rows = self._rows(varbinds)
        # (metric, labels, rank) → columns; a fallback row is redundant when some better rank has
        # every one of its columns answering for that row (parse needs all parts of a summed metric)
        groups: dict[tuple[str, tuple[tuple[str, str], ...], int], list[str]] = defaultdict(list)
        for c in self.columns:
            groups[(c.metric, c.labels, c.rank)].append(c.oid)
        skip = {c for c in self.all if not rows.get(c)}
        keep_speed = _speeds_disagree(varbinds)  # parse then trusts ifSpeed: it must stay in the poll
        for c in self.columns:
            if c.rank == 0 or c.oid in skip or (keep_speed and c.transform == "speed32"):
                continue
            better = [cols for (m, lab, r), cols in groups.items() if m == c.metric and lab == c.labels and r < c.rank]
            if all(any(all(idx in rows.get(o, ()) for o in cols) for cols in better) for idx in rows[c.oid]):
                skip.add(c.oid)
        # ifDescr only names interfaces whose ifName is missing or empty
        named = {oid.rpartition(".")[2] for oid, v in varbinds if oid.rpartition(".")[0] == oids.IF_NAME and text(v)}
        if rows.get(oids.IF_DESCR, set()) <= named:
            skip.add(oids.IF_DESCR)
        self.skipped = frozenset(skip - self.always)


def _speeds_disagree(varbinds: Sequence[tuple[str, Value]]) -> bool:
    """Some interface's ifHighSpeed (Mb/s) disagrees with its unsaturated ifSpeed (b/s): parse keeps ifSpeed there
    (parse._check_speeds), so a planned poll must not leave ifSpeed out."""
    speed: dict[str, int] = {}
    high: dict[str, int] = {}
    for oid, value in varbinds:
        head, _, idx = oid.lstrip(".").rpartition(".")
        if isinstance(value, int) and head in (IF_SPEED, IF_HIGH_SPEED):
            (speed if head == IF_SPEED else high)[idx] = value
    return any(0 < v < 4294967295 and idx in high and round(v / 1e6) != high[idx] for idx, v in speed.items())


IF_SPEED = "1.3.6.1.2.1.2.2.1.5"
IF_HIGH_SPEED = "1.3.6.1.2.1.31.1.1.1.15"
