"""Must be shown (#48): two runs of one model, the second with a newer NCCL (its all-reduce 0.158 s
faster) and a bad host in its placement (its GPU 0.225 s slower a step, so every other rank waits
for it). GET /v1/jobs/{a}/compare/{b} names both and apportions the gap within 20 % of each. Timings
go in through the ingest API as the training hook sends them: per rank, steps with phases and the
step's all-reduce, synchronous (every rank leaves the collective when the last one arrived)."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import httpx
import pytest

from tests.support import REPO

NCCL_GAIN_S = 0.158
BAD_HOST_S = 0.225
RANKS, STEPS = 8, 60
T0 = 1_780_000_000.0


def _run(api: httpx.Client, job: str, *, hosts: list[str], labels: dict[str, str], comm_s: float,
         slow_host: str | None, seed: int, t0: float) -> None:
    rng = random.Random(seed)
    ranks = [{"rank": r, "host": h, "gpu": "gpu0", "nic": "mlx5_0"} for r, h in enumerate(hosts)]
    assert api.put(f"/v1/jobs/{job}", json={"ranks": ranks, "labels": labels}).status_code == 200
    steps: list[dict[str, Any]] = []
    colls: list[dict[str, Any]] = []
    t = t0
    for s in range(STEPS):
        data = [0.05 + rng.uniform(0, 0.004) for _ in hosts]
        work = [1.0 + rng.gauss(0, 0.004) + (BAD_HOST_S if h == slow_host else 0.0) for h in hosts]
        arrive = [t + d + w for d, w in zip(data, work, strict=True)]
        done = max(arrive) + comm_s + rng.uniform(0, 0.002)
        end = done + 0.05  # optimizer
        for r in range(len(hosts)):
            steps.append({"rank": r, "step": s, "start": t, "end": end,
                          "phases": {"data": data[r], "forward_backward": done - t - data[r], "optimizer": 0.05,
                                     "checkpoint": 0.0}})
            colls.append({"rank": r, "step": s, "seq": 0, "op": "all_reduce", "bytes": 256 << 20,
                          "start": arrive[r], "end": done, "group": "dp", "group_size": len(hosts)})
        t = end + 0.001
    assert api.post("/v1/ingest/steps", json={"job": job, "steps": steps}).status_code in (200, 202)
    assert api.post("/v1/ingest/collectives", json={"job": job, "collectives": colls}).status_code in (200, 202)


def test_compare_names_nccl_and_bad_host(api: httpx.Client, fleet_svc: Any) -> None:
    model = {"model": "llama-8b", "torch": "2.3.0", "world_size": str(RANKS)}
    hosts = [f"cmp-node{i:02d}" for i in range(1, RANKS + 1)]
    _run(api, "cmp-a", hosts=hosts, labels={**model, "nccl": "2.18.3"}, comm_s=0.5, slow_host=None, seed=1, t0=T0)
    b_hosts = [*hosts[:-1], "cmp-node09"]
    _run(api, "cmp-b", hosts=b_hosts, labels={**model, "nccl": "2.21.5"}, comm_s=0.5 - NCCL_GAIN_S,
         slow_host="cmp-node09", seed=2, t0=T0 + 3600)
    got = api.get("/v1/jobs/cmp-a/compare/cmp-b")
    assert got.status_code == 200, got.text
    out = got.json()
    assert out["warnings"] == []
    assert out["steps_compared"] == {"a": STEPS, "b": STEPS}
    ex = {e["phase"]: e for e in out["explanations"]}
    comm, compute = ex["exposed_comm"], ex["compute"]
    assert comm["kind"] == "versions" and comm["differences"] == ["nccl: 2.18.3 -> 2.21.5"]
    assert comm["effect_s"] == pytest.approx(-NCCL_GAIN_S, rel=0.2)
    assert compute["kind"] == "placement" and "cmp-node09" in compute["differences"][0]
    assert compute["effect_s"] == pytest.approx(BAD_HOST_S, rel=0.2)
    # the two explain most of the gap; the rest is noise and the decomposition's residual
    assert comm["effect_s"] + compute["effect_s"] == pytest.approx(out["gap_s"], abs=0.02)
    assert [e["phase"] for e in out["explanations"][:2]] == ["compute", "exposed_comm"]
    assert out["placement"]["hosts"] == {"only_a": ["cmp-node08"], "only_b": ["cmp-node09"]}
    assert [x["label"] for x in out["labels"]] == ["nccl"]
    (ar,) = out["collectives"]
    assert ar["op"] == "all_reduce" and ar["bucket"] == 256 << 20
    assert "nccl" in out["summary"] and "cmp-node09" in out["summary"]
    print(f"\ncompare: exposed_comm {comm['effect_s']:+.3f} s (injected {-NCCL_GAIN_S:+.3f}), compute "
          f"{compute['effect_s']:+.3f} s (injected {BAD_HOST_S:+.3f}), gap {out['gap_s']:+.3f} s")

    # a different world size or model is compared with a warning, not refused
    _run(api, "cmp-c", hosts=hosts[:4], labels={**model, "model": "llama-70b", "world_size": "4",
                                                "nccl": "2.18.3"}, comm_s=0.5, slow_host=None, seed=3, t0=T0 + 7200)
    warned = api.get("/v1/jobs/cmp-a/compare/cmp-c").json()["warnings"]
    assert any("world sizes differ" in w for w in warned) and any("model" in w for w in warned)

    # the command line answers the same
    cli = subprocess.run([sys.executable, "-m", "fabricscope", "compare", "cmp-a", "cmp-b", "--url", str(api.base_url)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "cmp-node09" in cli.stdout and "nccl: 2.18.3 -> 2.21.5" in cli.stdout
