"""Hook-shaped steps and collectives of small jobs over past hours, and what the rollup must make
of them, computed here independently (numpy percentiles, a union of intervals by sorting)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

HOUR = 3600
STEP_S = 10.0
RANKS = 4
STEPS_PER_HOUR = 6  # one 10 s step every 10 minutes: small, and every hour has data


def base_hour(hours_back: int = 10) -> float:
    now = time.time()
    return now - now % HOUR - hours_back * HOUR


@dataclass
class Job:
    name: str
    labels: dict[str, str]
    first_hour: float
    hours: int
    comm: tuple[tuple[float, float], ...]  # (start, end) offsets of each all-reduce within a step
    seed: int = 0
    nbytes: int = 1 << 24  # each all-reduce's input bytes
    steps: list[dict[str, Any]] = field(default_factory=list)
    colls: list[dict[str, Any]] = field(default_factory=list)

    def build(self) -> Job:
        rng = np.random.default_rng(self.seed)
        n = 0
        for h in range(self.hours):
            for k in range(STEPS_PER_HOUR):
                t0 = self.first_hour + h * HOUR + k * 600 + 5
                for r in range(RANKS):
                    self.steps.append({"rank": r, "step": n, "start": t0, "end": t0 + STEP_S})
                    for i, (a, b) in enumerate(self.comm):
                        jitter = float(rng.uniform(0, 0.05))  # distinct durations: percentiles are not trivial
                        self.colls.append({"rank": r, "step": n, "seq": n * 10 + i, "op": "all_reduce",
                                           "bytes": self.nbytes, "start": t0 + a, "end": t0 + b + jitter,
                                           "group": "world", "group_size": RANKS})
                    self.colls.append({"rank": r, "step": n, "seq": n * 10 + 9, "op": "barrier", "bytes": 0,
                                       "start": t0 + 8.5, "end": t0 + 9.0, "group": "world", "group_size": RANKS})
                n += 1
        return self

    def post(self, api: httpx.Client, *, tag: str = "") -> None:
        r = api.put(f"/v1/jobs/{self.name}", json={"ranks": [{"rank": i, "host": f"h{i}"} for i in range(RANKS)],
                                                   "labels": self.labels})
        r.raise_for_status()
        for kind, items in (("steps", self.steps), ("collectives", self.colls)):
            for i in range(0, len(items), 500):
                r = api.post(f"/v1/ingest/{kind}", json={"job": self.name, "batch_id": f"{self.name}-{kind}{tag}-{i}",
                                                          kind: items[i:i + 500]})
                r.raise_for_status()

    # -- what the rollup must say, per hour start ----------------------------------------------
    def _hour(self, t: float) -> float:
        return t - t % HOUR

    def comm_fraction(self, exposed: bool = False) -> dict[float, float]:
        per: dict[float, list[float]] = {}
        by_rank_step: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for c in self.colls:
            if c["op"] != "barrier":
                by_rank_step.setdefault((c["rank"], c["step"]), []).append(c)
        for s in self.steps:
            cs = sorted(by_rank_step.get((s["rank"], s["step"]), []), key=lambda c: c["start"])
            if exposed:
                total, end = 0.0, -np.inf
                for c in cs:
                    a, b = max(c["start"], s["start"], end), min(c["end"], s["end"])
                    total += max(0.0, b - a)
                    end = max(end, min(c["end"], s["end"]))
            else:
                total = sum(c["end"] - c["start"] for c in cs)
            acc = per.setdefault(self._hour(s["start"]), [0.0, 0.0])
            acc[0] += total
            acc[1] += s["end"] - s["start"]
        return {h: v[0] / v[1] for h, v in per.items()}

    def quantiles(self, op: str = "all_reduce") -> dict[float, tuple[float, float, float]]:
        per: dict[float, list[float]] = {}
        for c in self.colls:
            if c["op"] == op:
                per.setdefault(self._hour(c["start"]), []).append(c["end"] - c["start"])
        return {h: tuple(float(np.percentile(v, q)) for q in (50, 99, 99.9)) for h, v in per.items()}  # type: ignore[misc]
