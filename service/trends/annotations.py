"""Change detection for the trends: version changes between jobs, jumps in comm fraction.

- ``version_change``: two consecutive jobs (by start) of the same group whose values of a version
  label (:data:`VERSION_KEYS`, as the hook reports them or the user set them) differ. A job without
  the label changes nothing: only a stated value differs from another stated value.
- ``comm_fraction_jump``: a bucket whose comm fraction is above the median of the group's trailing
  ``window`` buckets (those with data) by more than ``threshold`` relative (0.25: +25 %), with at
  least ``min_points`` trailing buckets; one annotation per excursion, at its first bucket.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

VERSION_KEYS: tuple[str, ...] = ("torch_version", "nccl_version", "cuda_version", "framework_version")


def version_changes(jobs: Sequence[Mapping[str, Any]], *, keys: Iterable[str] = VERSION_KEYS) -> list[dict[str, Any]]:
    """``jobs``: dicts with job, grp, labels, started, in start order."""
    keys = tuple(keys)
    last: dict[Any, Mapping[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for j in jobs:
        prev = last.get(j["grp"])
        if prev is not None:
            changes = {k: [prev["labels"][k], j["labels"][k]] for k in keys
                       if k in prev["labels"] and k in j["labels"] and str(prev["labels"][k]) != str(j["labels"][k])}
            if changes:
                text = ", ".join(f"{k.removesuffix('_version')} {a} → {b}" for k, (a, b) in changes.items())
                out.append({"ts": j["started"], "kind": "version_change", "group": j["grp"], "job": j["job"],
                            "previous_job": prev["job"], "changes": changes, "text": text})
        last[j["grp"]] = j
    return out


def comm_jumps(points: Sequence[tuple[datetime, float | None]], *, threshold: float, window: int,
               min_points: int) -> list[dict[str, Any]]:
    """``points``: (bucket start, comm fraction) in time order; buckets without data are skipped."""
    seen: list[float] = []
    out: list[dict[str, Any]] = []
    inside = False
    for ts, v in points:
        if v is None:
            continue
        trail = seen[-window:]
        jump = False
        if len(trail) >= min_points:
            med = statistics.median(trail)
            jump = med > 0 and v > med * (1 + threshold)
            if jump and not inside:
                out.append({"ts": ts, "kind": "comm_fraction_jump", "value": v, "trailing_median": med,
                            "change": v / med - 1,
                            "text": f"comm fraction {v:.3f} vs trailing median {med:.3f} ({v / med - 1:+.0%})"})
        inside = jump
        seen.append(v)
    return out
