"""GET /v1/jobs/{job}/efficiency and the report's efficiency section, on collectives posted through
the real ingest API with known durations; every expected number is computed here by hand from the
nccl-tests definitions (all-reduce 2(n-1)/n, all-gather (n-1)/n over n times the input). The service
is this module's own, its rollup job off: the rollup tests below roll the hours themselves, when
they choose, and the exact raw answers above cannot be turned into rollup ones behind their back."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from fabricscope.service.trends.rollup import refresh
from tests.acceptance.conftest import post_run, row, run_body, unique
from tests.support import TestDatabase, own_service

MIB = 1 << 20
HOUR = 3600


@pytest.fixture(scope="module")
def own(test_database: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(service URL, database URL): a database and service of this module's own, rollup job off."""
    off = {"FABRICSCOPE_ROLLUP_INTERVAL_S": "0"}
    with own_service(test_database, tmp_path_factory.mktemp("eff"), env=off) as (svc, url):
        yield svc.url, url


@pytest.fixture
def api(own: tuple[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own[0], timeout=30) as client:
        yield client


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
            d_ag = 2e-4 * (1 + 0.02 * i)  # all_gather_into_tensor: 256 KiB in, 1 MiB out; group size unknown
            items.append(coll(rank, step, 3 * step + 1, "all_gather_into_tensor", MIB // 4, t0 + step + 0.1, d_ag,
                              group_size=None))
            items.append(coll(rank, step, 3 * step + 2, "broadcast", 65536, t0 + step + 0.2, 1e-5))
            items.append(coll(rank, step, 3 * step + 2, "all_to_all_single", 8192, t0 + step + 0.3, 1e-5))
            items.append(coll(rank, step, 3 * step + 2, "barrier", 0, t0 + step + 0.4, 1e-3))
        # Each record's busbw is the collective's own time: the shortest of its four records (the
        # rank that arrived last waited for nobody), for all four of them.
        own_ar = min(stored(t0 + step, 1e-4 * (1 + 0.05 * (step * 4 + r))) for r in range(4))
        ar += [MIB / own_ar / 1e9 * 2 * 3 / 4] * 4
        own_ag = min(stored(t0 + step + 0.1, 2e-4 * (1 + 0.02 * (step * 4 + r))) for r in range(4))
        ag += [MIB / own_ag / 1e9 * 3 / 4] * 4
    # an hour earlier: a slow all_reduce that a time range leaves out
    items.append(coll(0, 0, 1000, "all_reduce", MIB, t0 - 3600, 1.0))
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
    assert 0.25 < ar["fraction"] < 0.3  # 1 MiB in 140 us (median own time) on 4 ranks: ~11.2 GB/s busbw against 40

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


# --- closed hours from the hourly rollup, the rest from the raw records -----------------------------

def wpct(items: list[tuple[float, int]], q: float) -> float:
    """percentile_cont over the list in which each value appears `weight` times."""
    xs = sorted(items)
    pos = q * (sum(w for _, w in xs) - 1)

    def at(j: int) -> float:
        cum = 0
        for v, w in xs:
            cum += w
            if cum > j:
                return v
        raise AssertionError(j)

    lo = int(pos)
    return at(lo) + (at(math.ceil(pos)) - at(lo)) * (pos - lo)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _eff(api: httpx.Client, job: str, window: dict[str, str]) -> dict[tuple[str, int, int], dict[str, Any]]:
    r = api.get(f"/v1/jobs/{job}/efficiency", params=window)
    assert r.status_code == 200, r.text
    return {(x["op"], x["bucket"], x["group_size"]): x for x in r.json()["rows"]}


def _post_hours(api: httpx.Client, job: str, h0: int, spread: float) -> dict[int, list[tuple[int, float]]]:
    """Five hours from h0 on 4 ranks: hour k has an all_reduce of 1 MiB (group 4), an all_gather of
    256 KiB (group unknown: 4 from job_ranks) and a barrier per rank and step, at whole seconds (so
    a duration is stored alike at any of them); hours 1-3 hold 3, 4, 5 steps at minutes 5, 15, ...,
    hours 0 and 4 a step at minute 10 and one at minute 40 / 50. Durations: 100 us x (1 + 0.4k), times
    1 + spread x U[0, 1) per record. Returns the all_reduce (start, duration) per hour."""
    rng = np.random.default_rng(19)
    items, ar, step = [], {}, 0  # type: ignore[var-annotated]
    for k in range(5):
        minutes = {0: [10, 40], 4: [10, 50]}.get(k, [5 + 10 * i for i in range(2 + k)])
        for minute in minutes:
            t = h0 + k * HOUR + minute * 60
            for rank in range(4):
                d = 1e-4 * (1 + 0.4 * k) * (1 + spread * float(rng.random()))
                ar.setdefault(k, []).append((t, d))
                items.append(coll(rank, step, 3 * step, "all_reduce", MIB, t, d))
                items.append(coll(rank, step, 3 * step + 1, "all_gather_into_tensor", MIB // 4, t + 1, 2 * d,
                                  group_size=None))
                items.append(coll(rank, step, 3 * step + 2, "barrier", 0, t + 2, 1e-3))
            step += 1
    r = api.post("/v1/ingest/collectives", json={"job": job, "collectives": items})
    assert r.status_code == 200, r.text
    return ar


def own_busbw(records: list[tuple[int, float]]) -> list[float]:
    """All-reduce busbw of 1 MiB on 4 ranks per record, from its collective's own time: the
    shortest of the collective's four records (one per rank, consecutive in ``records``)."""
    out = []
    for i in range(0, len(records), 4):
        own = min(stored(t, d) for t, d in records[i:i + 4])
        out += [MIB / own / 1e9 * 1.5] * len(records[i:i + 4])
    return out


@pytest.mark.parametrize("spread", [0.0, 0.5])
def test_efficiency_answers_closed_hours_from_the_rollup(api: httpx.Client, own: tuple[str, str],
                                                         spread: float) -> None:
    """The window [h0 + 30 min, h0 + 4 h 30 min): hours 1-3 rolled, the half hours at both edges raw.
    Alike values within each hour (spread 0): the same answer as from the raw records alone. Spread
    values (+0 to 50 % duration per record): the weighted percentile of the hourly p50/p10 and the
    edge records, computed here; for this data within 10 % of the exact median and p10 (each
    collective's four records share its own time, so an hour holds 3-5 distinct values).
    Counts and bytes are exact either way."""
    job, fabric = unique("eff-roll"), unique("eff-fab")
    r = api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": i, "host": f"h{i // 2}"} for i in range(4)],
                                          "labels": {"fabric": fabric}})
    assert r.status_code == 200, r.text
    post_run(api, run_body(fabric, [row(MIB, 40.0)], ranks=4, nodes=2))
    now = int(time.time())
    h0 = now - now % HOUR - 7 * HOUR
    ar = _post_hours(api, job, h0, spread)
    window = {"from": _iso(h0 + HOUR // 2), "to": _iso(h0 + 4 * HOUR + HOUR // 2)}
    key = ("all_reduce", MIB, 4)
    exact = _eff(api, job, window)  # nothing rolled yet: the raw records alone
    assert set(exact) == {key, ("all_gather", MIB, 4)} and exact[key]["collectives"] == 4 * (3 + 4 + 5) + 8

    with psycopg.connect(own[1], autocommit=True) as conn:
        refresh(conn, max_hours=1000)
        assert conn.execute("SELECT count(*) FROM rollup_hours h WHERE job = %s AND NOT EXISTS (SELECT 1 FROM "
                            "rollup_pending p WHERE p.job = h.job)", (job,)).fetchone() == (5,)
        rolled = _eff(api, job, window)
        assert set(rolled) == set(exact)
        for k, x in exact.items():
            assert rolled[k]["collectives"] == x["collectives"]
            assert rolled[k]["bytes"] == pytest.approx(x["bytes"], rel=1e-12)
        busbw = {k: own_busbw(v) for k, v in ar.items()}
        edges = [(v, 1) for t_d, v in zip(ar[0] + ar[4], busbw[0] + busbw[4], strict=True)
                 if h0 + HOUR // 2 <= t_d[0] < h0 + 4 * HOUR + HOUR // 2]
        for q, field in ((0.5, "busbw_median_gbps"), (0.1, "busbw_p10_gbps")):
            model = wpct(edges + [(pct(busbw[k], q), len(busbw[k])) for k in (1, 2, 3)], q)
            assert rolled[key][field] == pytest.approx(model, rel=1e-9), field
            if spread == 0:
                for k, x in exact.items():
                    assert rolled[k][field] == pytest.approx(x[field], rel=1e-12), (k, field)
            else:
                assert rolled[key][field] == pytest.approx(exact[key][field], rel=0.1)
        assert rolled[key]["fraction"] == pytest.approx(rolled[key]["busbw_median_gbps"] / 40.0, rel=1e-12)
        report = api.get(f"/v1/jobs/{job}/report", params=window).json()["efficiency"]
        assert {x["op"]: x["fraction"] for x in report["rows"]}["all_reduce"] == rolled[key]["fraction"]

        # Retention deletes the raw rows of a rolled hour: the answer comes from the rollup all the same.
        gone = conn.execute("DELETE FROM collectives WHERE job = %s AND start_ts >= to_timestamp(%s) "
                            "AND start_ts < to_timestamp(%s)", (job, h0 + 2 * HOUR, h0 + 3 * HOUR)).rowcount
        assert gone == 4 * 4 * 3
        assert _eff(api, job, window) == rolled

    # A late record in rolled hour 1 marks it: that hour is read raw again, the late record with it.
    t = h0 + HOUR + 50 * 60
    r = api.post("/v1/ingest/collectives", json={"job": job, "collectives": [
        coll(0, 99, 999, "all_reduce", MIB, t, ar[1][0][1])]})
    assert r.status_code == 200, r.text
    late = _eff(api, job, window)
    assert late[key]["collectives"] == rolled[key]["collectives"] + 1
    assert late[key]["bytes"] == rolled[key]["bytes"] + MIB
    raw1 = [(v, 1) for v in [*busbw[1], MIB / stored(t, ar[1][0][1]) / 1e9 * 1.5]]
    model = wpct(edges + raw1 + [(pct(busbw[k], 0.5), len(busbw[k])) for k in (2, 3)], 0.5)
    assert late[key]["busbw_median_gbps"] == pytest.approx(model, rel=1e-9)


def test_waiting_for_the_last_rank_is_not_low_bandwidth(api: httpx.Client) -> None:
    """#45 item 6: ranks arrive up to 30 ms apart (compute skew) and all finish together, 2 ms after
    the last one arrived: the collective's own time is 2 ms, and a fabric whose acceptance run did
    1 MiB in 2 ms reads 1.0, not the 0.1-0.3 that each rank's wait-inclusive record gives. A slow
    fabric (the last arrival's 2 ms becoming 4 ms) still reads 0.5: the own time carries it."""
    job, fabric = unique("eff-own"), unique("eff-fab")
    assert api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": i, "host": f"h{i}"} for i in range(4)],
                                             "labels": {"fabric": fabric}}).status_code == 200
    own_s = 2e-3
    base = MIB / own_s / 1e9 * 2 * 3 / 4
    post_run(api, run_body(fabric, [row(MIB, base)], ranks=4, nodes=4))
    t0 = time.time() - 600
    items = []
    for step in range(6):
        t_own = own_s if step < 3 else 2 * own_s  # steps 3-5: the fabric runs at half speed
        last = t0 + step + 0.03
        for rank in range(4):
            arrive = t0 + step + 0.01 * rank
            items.append(coll(rank, step, step, "all_reduce", MIB, arrive, last + t_own - arrive))
    assert api.post("/v1/ingest/collectives", json={"job": job, "collectives": items}).status_code == 200
    healthy = _eff(api, job, {"from": _iso(t0 - 1), "to": _iso(t0 + 2.5)})[("all_reduce", MIB, 4)]
    slow = _eff(api, job, {"from": _iso(t0 + 2.5), "to": _iso(t0 + 6)})[("all_reduce", MIB, 4)]
    assert healthy["fraction"] == pytest.approx(1.0, rel=1e-3)
    assert slow["fraction"] == pytest.approx(0.5, rel=1e-3)
