"""What the Capacity dashboard needs beyond the simulated job, posted through the API as a cluster
would: job labels the hook adds, earlier jobs of the same and of another model over the last two
days (an NCCL and a torch upgrade between them, two jumps in comm fraction), an acceptance
baseline of the simulated fabric, then the hourly rollup brought up to date."""

from __future__ import annotations

import time

import httpx
import numpy as np
import psycopg

from fabricscope.service.simulate.generator import Scenario
from tests.trends.synth import HOUR, Job, base_hour

FABRIC = "sim-fabric"
MODEL = "llama-sim"
MAIN_LABELS = {"model": MODEL, "fabric": FABRIC, "torch_version": "2.5.1", "nccl_version": "2.21.5",
               "cuda_version": "12.4", "world_size": "16"}
GiB = 1 << 30


def earlier_jobs() -> list[Job]:
    """Five 4-rank jobs in the 40 hours before the simulated one; 1 GiB all-reduces, 10 s steps. The
    last one's first all-reduce is twice as long: its comm fraction (~0.25) is a jump over the
    model's trailing median (~0.17), for two hours, one excursion."""
    t = base_hour(40)
    v1 = {"fabric": FABRIC, "torch_version": "2.4.0", "nccl_version": "2.20.5", "cuda_version": "12.4"}
    v2 = {**v1, "nccl_version": "2.21.5"}
    light, heavy = ((6.0, 6.8), (6.4, 7.3)), ((5.0, 6.9), (5.8, 7.6))
    slow = ((5.2, 6.8), (6.4, 7.3))
    return [Job("cap-llama-1", {"model": MODEL, **v1}, t, 8, light, seed=11, nbytes=GiB),
            Job("cap-mixtral-1", {"model": "mixtral-sim", **v1}, t + 4 * HOUR, 10, heavy, seed=12, nbytes=GiB),
            Job("cap-llama-2", {"model": MODEL, **v2}, t + 16 * HOUR, 10, light, seed=13, nbytes=GiB),
            Job("cap-mixtral-2", {"model": "mixtral-sim", **v2}, t + 28 * HOUR, 10, heavy, seed=14, nbytes=GiB),
            Job("cap-llama-3", {"model": MODEL, **v2}, t + 30 * HOUR, 2, slow, seed=15, nbytes=GiB)]


def current_job(t0: float) -> Job:
    """A mixtral job in the simulated job's first hour, three all-reduces a step instead of two: a
    jump in its model's comm fraction (~0.54 over ~0.37) inside the range the dashboards are
    checked on. Its steps end before now (the API rejects the future)."""
    three = ((3.0, 4.8), (5.0, 6.8), (7.0, 8.8))
    j = Job("cap-mixtral-3", {"model": "mixtral-sim", "fabric": FABRIC, "torch_version": "2.4.0",
                              "nccl_version": "2.21.5", "cuda_version": "12.4"},
            t0 - t0 % HOUR, 1, three, seed=16, nbytes=GiB).build()
    now = time.time()
    j.steps = [s for s in j.steps if s["end"] < now]
    j.colls = [c for c in j.colls if c["end"] < now]
    return j


def _run(ranks: int, sizes_gbps: dict[int, float]) -> dict[str, object]:
    rows = []
    for size, bw in sizes_gbps.items():
        for placement in ("out_of_place", "in_place"):
            t_us = size / (bw * 1e9 / (2 * (ranks - 1) / ranks)) * 1e6
            rows.append({"size_bytes": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1,
                         "placement": placement, "time_us": round(t_us, 1),
                         "algbw_gbps": round(size / t_us / 1e3, 2), "busbw_gbps": bw, "wrong": 0})
    return {"fabric": FABRIC, "op": "all_reduce", "ranks": ranks, "nodes": max(1, ranks // 4), "rows": rows,
            "source": "capacity-dashboard-test", "library": "nccl"}


def fill(api_url: str, db_url: str, sc: Scenario, job: str) -> list[Job]:
    with httpx.Client(base_url=api_url, timeout=60) as api:
        api.put(f"/v1/jobs/{job}", json={"ranks": [], "labels": MAIN_LABELS}).raise_for_status()
        jobs = [*(j.build() for j in earlier_jobs()), current_job(sc.t0)]
        for j in jobs:
            j.post(api)
        # what a healthy ring of the simulated spec reaches, and the 4-rank jobs' 1 GiB all-reduces at ~90 %
        sim_gbps = sc.spec.bus_bw_Bps / 1e9
        api.post("/v1/acceptance/runs", json=_run(16, {b: round(sim_gbps, 3)
                                                       for b in sorted(set(sc.spec.bucket_bytes))})
                 ).raise_for_status()
        durations = [c["end"] - c["start"] for c in jobs[0].colls if c["op"] == "all_reduce"]
        healthy = GiB / float(np.median(durations)) / 1e9 * 1.5
        api.post("/v1/acceptance/runs", json=_run(4, {GiB: round(healthy / 0.9, 3)})).raise_for_status()
    roll_all(db_url)
    return jobs


def roll_all(db_url: str, timeout_s: float = 120) -> None:
    from fabricscope.service.trends.rollup import refresh

    deadline = time.monotonic() + timeout_s
    with psycopg.connect(db_url) as conn:
        while refresh(conn, max_hours=500, budget_s=60).left and time.monotonic() < deadline:
            pass
