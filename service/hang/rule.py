"""The hang rule and the suspect search. Pure functions, no I/O.

A job is hung when no step has ended for longer than max(floor, factor x its own median step time),
unless a rank announced a checkpoint still in progress and younger than `checkpoint_s`: a long
checkpoint that completes is a long step, not a hang (the hook posts `checkpoint_in_progress` for a
checkpoint it is inside, collectors/training/lastwords.py).

Suspects, per process group, from each rank's last records: `finished` collectives (complete
records) and `entered` ones (the hook's `collective_entered` notice for a collective still in
flight). The collective the others wait in is the seq entered-and-unfinished by the most ranks
(ties: the highest seq). A rank of the group whose last seq is lower did not enter it; if its own
last record is itself unfinished it is stuck in that earlier collective (`not_finished`). A group
with no unfinished collective names nobody: nobody there is waiting.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

State = Literal["finished", "entered"]


@dataclass(frozen=True)
class Last:
    """A rank's last record in a group: its highest seq, and whether that collective finished."""

    rank: int
    group: str
    seq: int
    op: str
    state: State


@dataclass(frozen=True)
class Suspect:
    rank: int
    group: str
    seq: int
    op: str
    state: Literal["not_entered", "not_finished"]


def threshold_s(step_durations: Sequence[float], *, factor: float, floor_s: float) -> float:
    """max(floor, factor x median step); the floor alone while no step is known."""
    durs = [d for d in step_durations if d > 0]
    return max(floor_s, factor * statistics.median(durs)) if durs else floor_s


def is_hung(*, now: float, last_step_end: float | None, threshold: float,
            checkpoint_since: float | None, checkpoint_s: float) -> bool:
    if last_step_end is None or now - last_step_end <= threshold:
        return False
    return checkpoint_since is None or now - checkpoint_since > checkpoint_s


def suspects(last: Iterable[Last]) -> tuple[list[Suspect], list[int]]:
    """(suspects, waiting ranks) over every group; ranks sorted, one waiting entry per rank."""
    groups: dict[str, dict[int, Last]] = {}
    for rec in last:
        cur = groups.setdefault(rec.group, {}).get(rec.rank)
        if cur is None or (rec.seq, rec.state == "entered") > (cur.seq, cur.state == "entered"):
            groups[rec.group][rec.rank] = rec
    out: list[Suspect] = []
    waiting: set[int] = set()
    for group, per_rank in sorted(groups.items()):
        open_ = Counter(r.seq for r in per_rank.values() if r.state == "entered")
        if not open_:
            continue
        seq = max(open_, key=lambda s: (open_[s], s))
        op = next(r.op for r in per_rank.values() if r.seq == seq and r.state == "entered")
        for r in per_rank.values():
            if r.seq == seq and r.state == "entered":
                waiting.add(r.rank)
            elif r.seq < seq:
                if r.state == "entered":
                    out.append(Suspect(r.rank, group, r.seq, r.op, "not_finished"))
                else:
                    out.append(Suspect(r.rank, group, seq, op, "not_entered"))
    # a rank stuck somewhere is a suspect, not also a waiter elsewhere
    named = {s.rank for s in out}
    return sorted(out, key=lambda s: (s.rank, s.group)), sorted(waiting - named)
