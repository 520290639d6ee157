"""GET /v1/jobs/{job}/efficiency and the report's efficiency section, on collectives posted through
the real ingest API with known durations; every expected number is computed here by hand from the
nccl-tests definitions (all-reduce 2(n-1)/n, all-gather (n-1)/n over n times the input)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import post_run, row, run_body, unique

MIB = 1 << 20


def pct(values: list[float], q: float) -> float:
    """percentile_cont: linear interpolation between the closest ranks."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stored(t: float, d: float) -> float:
    """The duration the server stores: end - start of the posted epoch floats (not d exactly)."""
    return (t + d) - t


def coll(rank: int, step: int, seq: int, op: str, nbytes: int | None, t: float, d: float,
         group_size: int | None = 4) -> dict[str, Any]:
    c: dict[str, Any] = {"rank": rank, "step": step, "seq": seq, "op": op, "start": t, "end": t + d, "group": "world"}
    if nbytes is not None:
        c["bytes"] = nbytes
    if group_size is not None:
        c["group_size"] = group_size
    return c


@pytest.fixture
def job_with_collectives(api: httpx.Client) -> dict[str, Any]:
    job, fabric = unique("eff-job"), unique("eff-fab")
    # rank placement (4 ranks) and the fabric label, as an operator or the hook's labels would set it
    r = api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": i, "host": f"h{i // 2}"} for i in range(4)],
                                          "labels": {"fabric": fabric}})
    assert r.status_code == 200, r.text
    t0 = time.time() - 600
    items, ar, ag = [], [], []
    for step in range(5):
        for rank in range(4):
            i = step * 4 + rank
            d_ar = 1e-4 * (1 + 0.05 * i)  # all_reduce of 1 MiB on 4 ranks
            items.append(coll(rank, step, 3 * step, "all_reduce", MIB, t0 + step, d_ar))
            ar.append(MIB / stored(t0 + step, d_ar) / 1e9 * 2 * 3 / 4)
            d_ag = 2e-4 * (1 + 0.02 * i)  # all_gather_into_tensor: 256 KiB in, 1 MiB out; group size unknown
            items.append(coll(rank, step, 3 * step + 1, "all_gather_into_tensor", MIB // 4, t0 + step + 0.1, d_ag,
                              group_size=None))
            ag.append(MIB / stored(t0 + step + 0.1, d_ag) / 1e9 * 3 / 4)
            items.append(coll(rank, step, 3 * step + 2, "broadcast", 65536, t0 + step + 0.2, 1e-5))
            items.append(coll(rank, step, 3 * step + 2, "all_to_all_single", 8192, t0 + step + 0.3, 1e-5))
            items.append(coll(rank, step, 3 * step + 2, "barrier", 0, t0 + step + 0.4, 1e-3))
    # an hour earlier: a slow all_reduce that a time range leaves out
    items.append(coll(0, 0, 0, "all_reduce", MIB, t0 - 3600, 1.0))
    r = api.post("/v1/ingest/collectives", json={"job": job, "collectives": items})
    assert r.status_code == 200, r.text
    post_run(api, run_body(fabric, [row(MIB, 40.0), row(4096, 0.0)], ranks=4, nodes=2))
    post_run(api, run_body(fabric, [row(MIB, 8.0)], op="all_gather", ranks=4, nodes=2))
    post_run(api, run_body(fabric, [row(65536, 5.0)], op="broadcast", ranks=2, nodes=1))
    bc = [65536 / stored(t0 + step + 0.2, 1e-5) / 1e9 for step in range(5) for _rank in range(4)]
    return {"job": job, "fabric": fabric, "t0": t0, "ar": ar, "ag": ag, "bc": bc}


def test_efficiency_matches_hand_computed_busbw(api: httpx.Client, job_with_collectives: dict[str, Any]) -> None:
    j = job_with_collectives
    start = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(j["t0"] - 60))
    r = api.get(f"/v1/jobs/{j['job']}/efficiency", params={"from": start})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["fabric"] == j["fabric"] and out["stat"] == "median" and out["from"] is not None
    rows = {(x["op"], x["bucket"], x["group_size"]): x for x in out["rows"]}
    # barrier has no bytes; the hook's names map to nccl-tests ops
    assert set(rows) == {("all_reduce", MIB, 4), ("all_gather", MIB, 4), ("broadcast", 65536, 4),
                         ("alltoall", 8192, 4)}

    ar = rows[("all_reduce", MIB, 4)]
    assert ar["collectives"] == 20
    assert ar["busbw_median_gbps"] == pytest.approx(statistics.median(j["ar"]), rel=1e-9)
    assert ar["busbw_p10_gbps"] == pytest.approx(pct(j["ar"], 0.1), rel=1e-9)
    assert ar["baseline_busbw_gbps"] == 40.0 and ar["baseline_ranks"] == 4 and ar["scale"] == "same"
    assert ar["fraction"] == pytest.approx(statistics.median(j["ar"]) / 40.0, rel=1e-9)
    assert 0.25 < ar["fraction"] < 0.3  # 1 MiB in ~150 us (median) on 4 ranks: ~10.7 GB/s busbw against 40

    ag = rows[("all_gather", MIB, 4)]  # n from job_ranks (4), size = 4 x 256 KiB
    assert ag["busbw_median_gbps"] == pytest.approx(statistics.median(j["ag"]), rel=1e-9)
    assert ag["fraction"] == pytest.approx(statistics.median(j["ag"]) / 8.0, rel=1e-9)

    bc = rows[("broadcast", 65536, 4)]  # measured at 2 ranks only: the nearest smaller scale
    assert bc["scale"] == "nearest_smaller" and bc["baseline_ranks"] == 2
    assert bc["fraction"] == pytest.approx(statistics.median(j["bc"]) / 5.0, rel=1e-9)
    a2a = rows[("alltoall", 8192, 4)]
    assert a2a["fraction"] is None and a2a["baseline_busbw_gbps"] is None and a2a["scale"] is None

    # Without the range the hour-old slow all_reduce counts too; another fabric has no baseline.
    whole = {(x["op"], x["bucket"]): x for x in api.get(f"/v1/jobs/{j['job']}/efficiency").json()["rows"]}
    assert whole[("all_reduce", MIB)]["collectives"] == 21
    other = api.get(f"/v1/jobs/{j['job']}/efficiency", params={"fabric": "nowhere"}).json()
    assert other["fabric"] == "nowhere" and all(x["fraction"] is None for x in other["rows"])


def test_report_has_efficiency_section_with_warning(api: httpx.Client,
                                                    job_with_collectives: dict[str, Any]) -> None:
    j = job_with_collectives
    r = api.get(f"/v1/jobs/{j['job']}/report")
    assert r.status_code == 200, r.text
    rep = r.json()
    assert {"layers", "components", "lost_s"} <= set(rep)  # the report as before, plus the section
    eff = rep["efficiency"]
    assert eff["fabric"] == j["fabric"] and eff["threshold"] == 0.8 and eff["compared"] == 3
    by_op = {x["op"]: x for x in eff["rows"]}
    ar_all = [*j["ar"], MIB / stored(j["t0"] - 3600, 1.0) / 1e9 * 1.5]  # the whole history: the hour-old one too
    assert by_op["all_reduce"]["fraction"] == pytest.approx(statistics.median(ar_all) / 40.0, rel=1e-9)
    # all_reduce at ~0.27 and all_gather at ~0.41 of acceptance are below 0.8; broadcast is far above
    assert len(eff["warnings"]) == 2
    assert eff["warnings"][0].startswith(f"all_gather {MIB} B bucket on 4 ranks")
    assert "below 0.8" in eff["warnings"][1] and eff["warnings"][1].startswith("all_reduce")


def test_efficiency_bad_input_and_unknown_job(api: httpx.Client) -> None:
    assert api.get("/v1/jobs/no-such-job-x/efficiency").status_code == 404
    r = api.get("/v1/jobs/x/efficiency", params={"from": "2024-01-01T00:00:00"})
    assert r.status_code in (404, 422)
    job = unique("eff-empty")
    assert api.put(f"/v1/jobs/{job}", json={"labels": {"fabric": "f1"}}).status_code == 200
    r = api.get(f"/v1/jobs/{job}/efficiency", params={"from": "2024-01-01T00:00:00"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "from"]
    r = api.get(f"/v1/jobs/{job}/efficiency", params={"stat": "mean"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "stat"]
    r = api.get(f"/v1/jobs/{job}/efficiency")
    assert r.status_code == 200 and r.json()["fabric"] == "f1" and r.json()["rows"] == []
    assert api.get(f"/v1/jobs/{job}/report").json()["efficiency"] == {
        "fabric": "f1", "threshold": 0.8, "compared": 0, "rows": [], "warnings": []}
