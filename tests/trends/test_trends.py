"""GET /v1/trends and /v1/trends/annotations on data posted through the API and rolled up by the
service's own background job; every expected number is computed from the posted records here."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.trends.conftest import settled
from tests.trends.synth import HOUR, Job, base_hour

NORMAL = ((1.0, 3.0), (2.0, 4.0))  # two all-reduces in flight together: 4 s of comm, 3 s exposed
HEAVY = ((1.0, 5.0), (2.0, 6.0))  # after the "upgrade": 8 s of comm, 5 s exposed


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _points(body: dict[str, Any], **match: Any) -> dict[float, float]:
    (s,) = [s for s in body["series"] if all(s.get(k) == v for k, v in match.items())]
    return {datetime.fromisoformat(p["ts"]).timestamp(): p["value"] for p in s["points"]}


@pytest.fixture
def fleet(api: httpx.Client, trends_db: str, suite: str) -> dict[str, Job]:
    """m1: job a (NCCL 2.20.5) for 3 hours, then job b (NCCL 2.21.5, twice the comm) for 3 hours;
    m2: job c, 6 hours as a was. Only the `suite` label ties them to this test."""
    t0 = base_hour(8)
    common = {"suite": suite, "torch_version": "2.4.0"}
    jobs = {
        "a": Job(f"{suite}-a", {**common, "model": "m1", "nccl_version": "2.20.5"}, t0, 3, NORMAL, seed=1),
        "b": Job(f"{suite}-b", {**common, "model": "m1", "nccl_version": "2.21.5"}, t0 + 3 * HOUR, 3, HEAVY, seed=2),
        "c": Job(f"{suite}-c", {**common, "model": "m2", "nccl_version": "2.20.5"}, t0, 6, NORMAL, seed=3),
    }
    for j in jobs.values():
        j.build().post(api)
    settled(trends_db, *(j.name for j in jobs.values()))
    return jobs


def _get(api: httpx.Client, path: str = "/v1/trends", **params: Any) -> dict[str, Any]:
    r = api.get(path, params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_comm_and_exposed_fraction_per_hour_are_the_posted_ones(api: httpx.Client, fleet: dict[str, Job]) -> None:
    a = fleet["a"]
    window = {"from": _iso(a.first_hour), "to": _iso(a.first_hour + 6 * HOUR), "step": 3600}
    for metric, exposed in (("comm_fraction", False), ("exposed_comm_fraction", True)):
        body = _get(api, metric=metric, job=a.name, **window)
        assert body["unit"] == "fraction" and body["step"] == 3600 and not body["truncated"]
        got = _points(body, group=a.name)
        want = a.comm_fraction(exposed=exposed)
        assert got.keys() == want.keys() and len(got) == 3
        for h in want:
            # exposed comm comes from timestamps, which the database keeps to the microsecond
            assert got[h] == pytest.approx(want[h], rel=1e-6 if exposed else 1e-9), (metric, h)
    # exposed comm counts the overlapping all-reduces once: 3 of 4 s
    assert min(a.comm_fraction(exposed=True).values()) < 0.8 * min(a.comm_fraction().values())


def test_collective_percentiles_per_op_and_bucket(api: httpx.Client, fleet: dict[str, Job]) -> None:
    c = fleet["c"]
    want = c.quantiles()
    for i, metric in enumerate(("collective_p50_s", "collective_p99_s", "collective_p999_s")):
        body = _get(api, metric=metric, job=c.name, op="all_reduce", step=3600, **{"from": _iso(c.first_hour)})
        (s,) = body["series"]
        assert (s["op"], s["bucket"], s["group"]) == ("all_reduce", 1 << 24, c.name)
        got = {datetime.fromisoformat(p["ts"]).timestamp(): p["value"] for p in s["points"]}
        assert got.keys() == want.keys()
        for h, q in want.items():
            assert got[h] == pytest.approx(q[i], rel=1e-9)
        assert all(p["samples"] == 6 * 4 * 2 for p in s["points"])  # 6 steps x 4 ranks x 2 all-reduces


def test_grouped_by_a_label_and_filtered_by_labels(api: httpx.Client, fleet: dict[str, Job], suite: str) -> None:
    a, b = fleet["a"], fleet["b"]
    body = _get(api, metric="comm_fraction", by="model", step=2 * 3600, **{"label.suite": suite,
                                                                          "from": _iso(a.first_hour)})
    assert body["by"] == "model" and body["labels"] == {"suite": suite}
    assert sorted(s["group"] for s in body["series"]) == ["m1", "m2"]
    m1 = _points(body, group="m1")
    # 2-hour buckets: two of a's hours, then a's last with b's first, then two of b's (equal step time)
    hourly = {**a.comm_fraction(), **b.comm_fraction()}
    want = {t: (hourly[t] + hourly[t + HOUR]) / 2 for t in (a.first_hour + k * 2 * HOUR for k in range(3))}
    assert m1.keys() == want.keys()
    for t in want:
        assert m1[t] == pytest.approx(want[t], rel=1e-9)
    assert [p["jobs"] for p in _series(body, "m1")] == [1, 2, 1]
    only = _get(api, metric="comm_fraction", by="model", **{"label.suite": suite, "label.model": "m2",
                                                            "from": _iso(a.first_hour)})
    assert [s["group"] for s in only["series"]] == ["m2"]
    assert _get(api, metric="comm_fraction", **{"label.suite": suite, "label.model": "m3"})["series"] == []


def _series(body: dict[str, Any], group: str) -> list[dict[str, Any]]:
    (s,) = [s for s in body["series"] if s["group"] == group]
    points: list[dict[str, Any]] = s["points"]
    return points


def test_annotations_name_the_version_change_and_the_comm_jump(api: httpx.Client, fleet: dict[str, Job],
                                                               suite: str) -> None:
    a, b = fleet["a"], fleet["b"]
    body = _get(api, "/v1/trends/annotations", by="model", step=3600,
                **{"label.suite": suite, "from": _iso(a.first_hour)})
    kinds = [(x["kind"], x["group"]) for x in body["annotations"]]
    assert sorted(kinds) == [("comm_fraction_jump", "m1"), ("version_change", "m1")], body
    ver = next(x for x in body["annotations"] if x["kind"] == "version_change")
    assert (ver["job"], ver["previous_job"]) == (b.name, a.name)
    assert ver["changes"] == {"nccl_version": ["2.20.5", "2.21.5"]} and "2.20.5 → 2.21.5" in ver["text"]
    assert datetime.fromisoformat(ver["ts"]).timestamp() == b.steps[0]["start"]
    jump = next(x for x in body["annotations"] if x["kind"] == "comm_fraction_jump")
    assert datetime.fromisoformat(jump["ts"]).timestamp() == b.first_hour  # the first hour of b, once
    assert jump["trailing_median"] == pytest.approx(a.comm_fraction()[a.first_hour], rel=0.05)
    assert jump["change"] > 0.25
    # m2 changed nothing: no annotation for it, and none at all when it is chosen alone
    alone = _get(api, "/v1/trends/annotations", by="model", **{"label.suite": suite, "label.model": "m2",
                                                               "from": _iso(a.first_hour)})
    assert alone["annotations"] == []


def test_late_rows_re_roll_their_hour(api: httpx.Client, fleet: dict[str, Job], trends_db: str) -> None:
    """Rows for an hour rolled long ago (a spool replay) bring that hour back into the rollup."""
    a = fleet["a"]
    h0 = a.first_hour
    before = _points(_get(api, metric="comm_fraction", job=a.name, step=3600, **{"from": _iso(h0)}), group=a.name)
    late = Job(a.name, a.labels, h0, 1, HEAVY, seed=9).build()
    for s in late.steps + late.colls:
        s["step"] += 1000  # new steps of the same job in its first hour
        s["start"] += 60
        s["end"] += 60
    late.post(api, tag="-late")
    settled(trends_db, a.name)
    after = _points(_get(api, metric="comm_fraction", job=a.name, step=3600, **{"from": _iso(h0)}), group=a.name)
    merged_num = a.comm_fraction()[h0] * 6 * 4 * 10 + late.comm_fraction()[h0] * 6 * 4 * 10
    assert after[h0] == pytest.approx(merged_num / (2 * 6 * 4 * 10), rel=1e-9)
    assert after[h0] > before[h0] and after[h0 + HOUR] == before[h0 + HOUR]


def test_result_size_is_bounded(api: httpx.Client, fleet: dict[str, Job], suite: str) -> None:
    """Three jobs x (all_reduce, barrier) are six series; the service is set to answer three."""
    body = _get(api, metric="collective_p99_s", **{"label.suite": suite, "from": _iso(fleet["a"].first_hour)})
    assert body["truncated"] and len(body["series"]) == 3
    assert all(s["op"] == "all_reduce" for s in body["series"])  # the largest series come first


@pytest.mark.parametrize(("params", "field"), [
    ({"metric": "comm_share"}, "metric"),
    ({}, "metric"),
    ({"metric": "comm_fraction", "from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "to"),
    ({"metric": "comm_fraction", "step": "5400"}, "step"),
    ({"metric": "comm_fraction", "step": "60"}, "step"),
    ({"metric": "comm_fraction", "from": "2024-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z", "step": "3600"},
     "step"),
    ({"metric": "comm_fraction", "from": "2026-01-01T00:00:00"}, "from"),
    ({"metric": "comm_fraction", "to": "0001-01-01T00:00:12Z"}, "to"),
    ({"metric": "comm_fraction", "from": "9999-01-01T00:00:00Z", "to": "9999-12-31T00:00:00Z"}, "from"),
    ({"metric": "comm_fraction", "label.1x": "a"}, "label.1x"),
    ({"metric": "comm_fraction", "label.model": ""}, "label.model"),
    ({"metric": "comm_fraction", "by": "model-name"}, "by"),
    ({"metric": "collective_p50_s", "bucket": "0"}, "bucket"),
])
def test_bad_parameters_are_4xx_naming_the_field(api: httpx.Client, params: dict[str, str], field: str) -> None:
    for path in ("/v1/trends", "/v1/trends/annotations"):
        if path.endswith("annotations") and field in ("metric", "bucket"):
            continue
        r = api.get(path, params=params)
        assert r.status_code == 422, (path, r.text)
        locs = [d["loc"] for d in r.json()["detail"]]
        assert ["query", field] in locs, (path, r.json())


def test_labels_the_hook_detects_group_the_trends(api: httpx.Client, trends_db: str, suite: str,
                                                  tmp_path: Any) -> None:
    """The training hook registers its job with the parallelism env as labels; `by=tp` groups by them."""
    import time

    from fabricscope.training import Recorder

    job = f"{suite}-hook"
    env = {"WORLD_SIZE": "1", "TENSOR_MODEL_PARALLEL_SIZE": "2", "PIPELINE_MODEL_PARALLEL_SIZE": "4"}
    rec = Recorder(str(api.base_url), job, rank=0, env=env, spool=tmp_path, collectives=False,
                   flush_interval_s=0.05, labels={"suite": suite}).start()
    for n in range(3):
        with rec.step(n):
            t = time.time()
            time.sleep(0.02)
            rec.record_collective("all_reduce", t, t + 0.01, bytes=1 << 20, group="world", group_size=2)
    assert rec.flush(10)
    rec.close()
    labels = api.get(f"/v1/jobs/{job}").json()["labels"]
    assert {k: labels[k] for k in ("world_size", "tp", "pp", "suite")} == {
        "world_size": "1", "tp": "2", "pp": "4", "suite": suite}
    settled(trends_db, job)
    body = _get(api, metric="comm_fraction", by="tp", **{"label.suite": suite, "label.pp": "4"})
    (s,) = body["series"]
    assert s["group"] == "2" and 0.2 < s["points"][-1]["value"] < 1.0


def test_busbw_fraction_against_the_acceptance_baseline(api: httpx.Client, trends_db: str, suite: str) -> None:
    """A 4-rank acceptance run of the job's fabric at 16 MiB; each hour's busbw median over it."""
    import numpy as np

    fabric = f"fab-{suite}"
    base_gbps = 0.02
    row = {"size_bytes": 1 << 24, "count": 1 << 22, "type": "float", "redop": "sum", "root": -1, "time_us": 1.0,
           "algbw_gbps": 0.0, "busbw_gbps": base_gbps, "wrong": 0}
    run = {"fabric": fabric, "op": "all_reduce", "ranks": 4, "nodes": 1, "source": "synthetic",
           "rows": [{**row, "placement": "out_of_place"}, {**row, "placement": "in_place", "busbw_gbps": 99.0}]}
    assert api.post("/v1/acceptance/runs", json=run).status_code == 201
    job = Job(f"{suite}-bw", {"suite": suite, "fabric": fabric}, base_hour(3), 2, NORMAL, seed=5).build()
    job.post(api)
    settled(trends_db, job.name)
    body = _get(api, metric="busbw_fraction", job=job.name, step=3600, **{"from": _iso(job.first_hour)})
    got = _points(body, op="all_reduce", bucket=1 << 24)
    for h in (job.first_hour, job.first_hour + HOUR):
        ars = [c for c in job.colls if c["op"] == "all_reduce" and h <= c["start"] < h + HOUR]
        own: dict[tuple[int, int], float] = {}  # the collective's own time: its shortest record
        for c in ars:
            key = (c["step"], c["seq"])
            own[key] = min(own.get(key, math.inf), c["end"] - c["start"])
        d = [own[(c["step"], c["seq"])] for c in ars]
        busbw = np.median([(1 << 24) / x / 1e9 * 2 * 3 / 4 for x in d])  # nccl-tests: 2(n-1)/n on 4 ranks
        assert got[h] == pytest.approx(busbw / base_gbps, rel=1e-9)
    # a job without a fabric label has no baseline: no busbw fraction (not a zero), its other trends stay
    bare = Job(f"{suite}-nofab", {"suite": suite}, base_hour(3), 1, NORMAL, seed=6).build()
    bare.post(api)
    settled(trends_db, bare.name)
    assert _get(api, metric="busbw_fraction", job=bare.name, **{"from": _iso(bare.first_hour)})["series"] == []
    assert _get(api, metric="collective_p50_s", job=bare.name, **{"from": _iso(bare.first_hour)})["series"]
