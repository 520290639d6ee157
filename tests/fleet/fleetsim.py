"""A simulated fleet for the ledger: 30 jobs over 10 days, one cable that degrades from day 4, one GPU
that throttles in 3 jobs, and background noise on other components. Slow-step attributions are
written through the engine's own storage call (correlate.queries.store_attribution), so the ledger
reads what the engine writes; the expected GPU-hours are computed here from the same numbers."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from fabricscope.service.correlate.queries import store_attribution

CABLE = "leaf3:Ethernet12"
GPU = "node21:gpu3"
RANKS = 64
JOBS_PER_DAY = 3
DAYS = 10
CABLE_DAY = 4
GPU_DAYS = (2, 5, 7)  # one job each
NOISE = ([f"leaf{i}:Ethernet{j}" for i in range(1, 5) for j in range(1, 5) if f"leaf{i}:Ethernet{j}" != CABLE]
         + [f"node{i:02d}:mlx5_{j}" for i in range(1, 9) for j in range(2)]
         + [f"node{i:02d}" for i in range(30, 40)] + ["nas1:/mnt/ckpt", "nas1:/mnt/data"])
NOISE_LAYER = {"leaf": "fabric", "node": "nic", "nas": "storage"}


def noise_layer(c: str) -> str:
    if c.startswith("node") and ":" not in c:
        return "host"
    return NOISE_LAYER[c.split(":")[0].rstrip("0123456789")]


@dataclass
class Fleet:
    t0: datetime
    seed: int
    expected_gpu_s: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    jobs_of: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def day(self, d: int) -> datetime:
        return self.t0 + timedelta(days=d)

    def job(self, d: int, k: int) -> str:
        return f"fleet{self.seed}-d{d}-j{k}"


def _att(step: int, start: datetime, excess: float, causes: list[tuple[str, str, float]],
         evidence: list[dict[str, Any]]) -> dict[str, Any]:
    top = max(causes, key=lambda c: c[2])
    return {"step": step, "start": start.isoformat(), "slow": True, "duration_s": 2.0 + excess, "baseline_s": 2.0,
            "layer": top[0], "component": top[1], "confidence": 0.8, "lost_s": round(excess, 6),
            "evidence": evidence,
            "causes": [{"layer": lay, "component": comp, "lost_s": round(w, 6), "confidence": 0.8}
                       for lay, comp, w in causes]}


def _ev(source: str, metric: str, value: float, score: float) -> dict[str, Any]:
    return {"source": source, "metric": metric, "value": value, "baseline": 0.0, "score": score}


def _job(rng: random.Random, fleet: Fleet, d: int, k: int) -> list[dict[str, Any]]:
    """One job's slow-step attributions; adds their expected GPU-seconds to fleet.expected_gpu_s[d]."""
    job, exp = fleet.job(d, k), fleet.expected_gpu_s[d]
    start = fleet.day(d) + timedelta(hours=2 + 6 * k)
    atts: list[dict[str, Any]] = []
    step = 0

    def add(excess: float, causes: list[tuple[str, str, float]], ev: list[dict[str, Any]]) -> None:
        nonlocal step
        step += rng.randint(1, 30)
        excess = round(excess, 6)  # as stored
        causes = [(lay, comp, round(w, 6)) for lay, comp, w in causes]
        atts.append(_att(step, start + timedelta(seconds=2.1 * step), excess, causes, ev))
        total = sum(w for _, _, w in causes)
        for _lay, comp, w in causes:
            exp[comp] += excess * w / total * RANKS
            fleet.jobs_of[comp].add(job)

    if d >= CABLE_DAY:  # the cable degrades: more loss every day
        for _ in range(50):
            x = 0.3 + 0.08 * (d - CABLE_DAY) + rng.uniform(-0.05, 0.05)
            add(x, [("link", CABLE, x)], [_ev(CABLE, "rx_fcs_errors_total", 120.0 * (d - 3), 9.0),
                                          _ev("node01:mlx5_0", "rdma_retransmits_total", 3.0, 2.0)])
    if d in GPU_DAYS and k == 1:  # the throttling GPU
        for _ in range(60):
            x = rng.uniform(0.35, 0.45)
            add(x, [("compute", GPU, x)], [_ev(GPU, "gpu_clock_throttle_reasons", 1.0, 6.0)])
    for _ in range(12):  # noise: one or two causes a step, small
        x = rng.uniform(0.05, 0.3)
        picks = rng.sample(NOISE, rng.randint(1, 2))
        add(x, [(noise_layer(c), c, x * rng.uniform(0.2, 1.0)) for c in picks],
            [_ev(picks[0], "rx_discards_total", 5.0, 3.0)])
    return atts


def write_day(api: httpx.Client, db_url: str, fleet: Fleet, d: int) -> None:
    """Day d's three jobs: their placement through the API, their slow-step attributions through the
    engine's storage call; the expected GPU-seconds per component into fleet.expected_gpu_s[d]."""
    rng = random.Random(fleet.seed * 1000 + d)
    with psycopg.connect(db_url) as conn:
        for k in range(JOBS_PER_DAY):
            job = fleet.job(d, k)
            ranks = [{"rank": r, "host": f"node{(r // 8) + 10 * k + 1:02d}", "gpu": f"gpu{r % 8}", "nic": "mlx5_0"}
                     for r in range(RANKS)]
            assert api.put(f"/v1/jobs/{job}", json={"ranks": ranks, "labels": {"model": "m"}}).status_code == 200
            for a in _job(rng, fleet, d, k):
                store_attribution(conn, job=job, attribution=a)
        conn.commit()


def expected_ranking(fleet: Fleet, first: int, last: int) -> list[tuple[str, float]]:
    tot: dict[str, float] = defaultdict(float)
    for d in range(first, last + 1):
        for c, v in fleet.expected_gpu_s[d].items():
            tot[c] += v
    return sorted(tot.items(), key=lambda kv: (-kv[1], kv[0]))


def fleet_start(seed: int) -> datetime:
    """Each seed its own month in the past: the windows of two seeds never overlap."""
    return datetime(2026, 1 + 2 * seed, 1, tzinfo=UTC)
