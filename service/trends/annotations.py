"""Change detection for the trends: version changes between jobs, jumps in comm fraction.

- ``version_change``: a job (in start order within its group) whose value of a version label
  (:data:`VERSION_KEYS`, as the hook reports them or the user set them) differs from the last value
  stated by an earlier job of the group. A job without the label changes nothing.
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
    """``jobs``: dicts with job, grp, labels, started, in start order. Each job's version labels are
    compared with the last value stated in its group, so a job that does not state one (an import,
    an older hook) neither hides nor fakes a change."""
    keys = tuple(keys)
    stated: dict[Any, dict[str, str]] = {}  # group -> key -> last stated value
    prev_job: dict[Any, str] = {}
    out: list[dict[str, Any]] = []
    for j in jobs:
        known = stated.setdefault(j["grp"], {})
        now = {k: str(j["labels"][k]) for k in keys if k in j["labels"]}
        changes = {k: [known[k], v] for k, v in now.items() if k in known and known[k] != v}
        if changes:
            text = ", ".join(f"{k.removesuffix('_version')} {a} → {b}" for k, (a, b) in changes.items())
            out.append({"ts": j["started"], "kind": "version_change", "group": j["grp"], "job": j["job"],
                        "previous_job": prev_job.get(j["grp"]), "changes": changes, "text": text})
        known.update(now)
        prev_job[j["grp"]] = j["job"]
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
