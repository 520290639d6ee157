"""Bounded collective volume on the service's side (#45 item 3), against the real service and database:
POST /v1/ingest/collective_summaries, its 422s, GET/POST /v1/jobs/{job}/detail_requests, and the
helper a judge calls for a slow step that has a summary but no detail."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from fabricscope.service.ingest import detail
from tests.support import TestDatabase, own_service

T = time.time() - 600


def summary(step: int, rank: int = 0, **over: Any) -> dict[str, Any]:
    s = {"rank": rank, "step": step, "op": "all_reduce", "bucket": 4096, "group_size": 4, "count": 10,
         "total_s": 0.5, "max_s": 0.2, "bytes": 50_000, "slowest_group": "world", "slowest_seq": 17,
         "start": T + step, "end": T + step + 0.9}
    s.update(over)
    return s


def job() -> str:
    return f"vol-{uuid.uuid4().hex[:8]}"


def test_summaries_are_stored_once_and_sum_per_key(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    j = job()
    body = {"job": j, "batch_id": f"b-{j}", "collective_summaries": [summary(1), summary(1, rank=1),
                                                                     summary(2, op="barrier", bucket=0, bytes=None)]}
    body["collective_summaries"][2].pop("bytes")
    for _ in range(2):  # the retry is stored once
        r = api.post("/v1/ingest/collective_summaries", json=body)
        assert r.status_code == 200, r.text
    # a late item of the same key (a timing that resolved after the step was summarized) adds to it
    r = api.post("/v1/ingest/collective_summaries", json={"job": j, "collective_summaries": [
        summary(1, count=1, total_s=0.3, max_s=0.3, bytes=4096, slowest_seq=18)]})
    assert r.status_code == 200, r.text
    rows = db_conn.execute(
        """SELECT rank, step, op, bucket, group_size, sum(count), sum(total_s), max(max_s), sum(bytes),
                  (array_agg(slowest_seq ORDER BY max_s DESC))[1]
             FROM collective_summaries WHERE job = %s GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3""", (j,)).fetchall()
    assert [r[:6] for r in rows] == [(0, 1, "all_reduce", 4096, 4, 11), (0, 2, "barrier", 0, 4, 10),
                                     (1, 1, "all_reduce", 4096, 4, 10)]
    assert abs(rows[0][6] - 0.8) < 1e-9 and rows[0][7] == 0.3 and rows[0][8] == 54_096 and rows[0][9] == 18
    assert rows[1][8] is None


def test_bad_summaries_are_refused_naming_the_field(api: httpx.Client) -> None:
    j = job()
    for bad, field in ((summary(1, bucket=1000), "bucket"), (summary(1, max_s=0.9), "max_s"),
                       (summary(1, count=0), "count"), (summary(1, total_s=-1.0), "total_s"),
                       (summary(1, end=T - 5), "end")):
        r = api.post("/v1/ingest/collective_summaries", json={"job": j, "collective_summaries": [summary(0), bad]})
        assert r.status_code == 422, (field, r.text)
        locs = [e["loc"] for e in r.json()["detail"]]
        assert ["body", "collective_summaries", 1, field] in locs, (field, locs)


def test_detail_requests_are_posted_polled_per_rank_and_made_for_slow_steps_without_detail(
        api: httpx.Client, db_conn: psycopg.Connection) -> None:
    j = job()
    assert api.get(f"/v1/jobs/{j}/detail_requests").json() == {"job": j, "requests": []}  # unknown job: nothing
    assert api.post(f"/v1/jobs/{j}/detail_requests", json={"steps": [3]}).status_code == 404
    r = api.post("/v1/ingest/collective_summaries", json={"job": j, "collective_summaries": [
        summary(s, rank=r) for s in (5, 6, 7) for r in (0, 1)]})
    assert r.status_code == 200, r.text
    r = api.post("/v1/ingest/collectives", json={"job": j, "collectives": [  # step 6 was sampled on rank 0 only
        {"rank": 0, "step": 6, "seq": 1, "op": "all_reduce", "bytes": 4096, "start": T + 6, "end": T + 6.1}]})
    assert r.status_code == 200, r.text

    bad = api.post(f"/v1/jobs/{j}/detail_requests", json={"steps": [-1]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "steps", 0]
    r = api.post(f"/v1/jobs/{j}/detail_requests", json={"steps": [5], "ranks": [1], "reason": "operator"})
    assert r.status_code == 201, r.text
    first = r.json()["requests"][0]["id"]
    assert [q["step"] for q in api.get(f"/v1/jobs/{j}/detail_requests", params={"rank": 1}).json()["requests"]] == [5]
    assert api.get(f"/v1/jobs/{j}/detail_requests", params={"rank": 0}).json()["requests"] == []

    # the judge: steps 6 and 7 are slow; 6 has rank 0's detail but not rank 1's, 7 has none
    assert detail.steps_without_detail(db_conn, job=j, steps=[5, 6, 7]) == [5, 6, 7]
    made = detail.request_missing(db_conn, job=j, steps=[6, 7])
    db_conn.commit()
    assert [(m["step"], m["rank"]) for m in made] == [(6, None), (7, None)]
    assert detail.request_missing(db_conn, job=j, steps=[6, 7]) == []  # asked once
    polled = api.get(f"/v1/jobs/{j}/detail_requests", params={"rank": 0, "after": first}).json()["requests"]
    assert [q["step"] for q in polled] == [6, 7]
    assert api.get(f"/v1/jobs/{j}/detail_requests", params={"rank": 0, "after": polled[-1]["id"]}).json()[
        "requests"] == []


def test_the_attribution_worker_asks_every_rank_for_a_slow_steps_detail(test_database: TestDatabase,
                                                                       tmp_path: Path) -> None:
    """The service's own worker (on arrival) judges a bounded-detail job and asks for the records of
    the step it found slow that a rank only summarized; the healthy steps are not asked for."""
    with own_service(test_database, tmp_path, env={"FABRICSCOPE_CORRELATE_INTERVAL_S": "60"}) as (svc, _), \
            httpx.Client(base_url=svc.url, timeout=30) as api:
        _slow_step_is_asked_for(api)


def _slow_step_is_asked_for(api: httpx.Client) -> None:
    j = job()
    api.put(f"/v1/jobs/{j}", json={"ranks": [{"rank": r, "host": f"{j}-h{r}"} for r in (0, 1)]}).raise_for_status()
    t, steps, summaries, records = time.time() - 300, [], [], []
    for s in range(30):
        d = 2.0 if s == 20 else 1.0 + 0.01 * (s % 3)
        for r in (0, 1):
            steps.append({"rank": r, "step": s, "start": t, "end": t + d})
            summaries.append(summary(s, rank=r, start=t, end=t + d * 0.5))
        records.append({"rank": 0, "step": s, "seq": s, "op": "all_reduce", "bytes": 4096,  # rank 0 sampled
                        "start": t, "end": t + d * 0.5, "group": "world", "group_size": 2})
        t += d
    for kind, items in (("collective_summaries", summaries), ("collectives", records), ("steps", steps)):
        api.post(f"/v1/ingest/{kind}", json={"job": j, kind: items}).raise_for_status()
    deadline, asked = time.monotonic() + 30, []
    while time.monotonic() < deadline and not asked:
        asked = api.get(f"/v1/jobs/{j}/detail_requests", params={"rank": 1}).json()["requests"]
        time.sleep(0.3)
    assert [q["step"] for q in asked] == [20], asked
    assert api.get(f"/v1/jobs/{j}/steps", params={"slow": "true"}).json()[0]["step"] == 20
