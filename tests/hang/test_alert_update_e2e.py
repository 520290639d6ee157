"""An open job_hang alert follows the suspects, end to end through the real service: a hung 3-rank
job staged through the ingest API (steps, collectives, the hook's in-flight notices), the service's
hang alert loop, the delivery queue and real local webhook receivers. When a host agent's NCCL RAS
report names ranks after the alert fired on the collective records, GET /v1/alerts shows them and
each webhook gets exactly one `updated` notification (generic body; PagerDuty: a trigger on the same
dedup_key), then nothing more while nothing changes, then the resolve notice."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from tests.alerts.conftest import client, wait_for
from tests.alerts.receiver import Receiver, free_port
from tests.support import ServiceProcess

WORLD, DUR = 3, 0.1
SERVICE_ENV = {"FABRICSCOPE_HANG_FLOOR_S": "1", "FABRICSCOPE_HANG_FACTOR": "5"}


def _post(api: httpx.Client, path: str, doc: dict[str, Any]) -> None:
    r = api.post(path, json=doc)
    assert r.status_code == 200, r.text


def _stage_hung_job(api: httpx.Client, job: str) -> None:
    """10 steps that ended 3 s ago (threshold max(1, 5 x 0.1) = 1 s); ranks 0 and 1 are inside the
    world all-reduce seq 11, rank 2 never entered it."""
    r = api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": r, "host": f"node{r}"} for r in range(WORLD)]})
    assert r.status_code in (200, 201), r.text
    t_end = time.time() - 3
    steps, colls = [], []
    for i in range(10):
        end = t_end - (9 - i) * DUR
        for rk in range(WORLD):
            steps.append({"rank": rk, "step": i, "start": end - DUR, "end": end})
            colls.append({"rank": rk, "step": i, "seq": i + 1, "op": "all_reduce", "bytes": 1024,
                          "start": end - 0.01, "end": end, "group": "world", "group_size": WORLD})
    _post(api, "/v1/ingest/steps", {"job": job, "steps": steps})
    _post(api, "/v1/ingest/collectives", {"job": job, "collectives": colls})
    events = [{"kind": "hang_watch", "source": f"node{r}", "job": job, "start": t_end - 10, "attrs": {"rank": r}}
              for r in range(WORLD)]
    events += [{"kind": "collective_entered", "source": f"node{r}", "job": job, "start": t_end + 0.5,
                "attrs": {"rank": r, "group": "world", "seq": 11, "op": "all_reduce", "step": 10}} for r in (0, 1)]
    _post(api, "/v1/ingest/events", {"events": events})


def _ras_report(job: str) -> dict[str, Any]:
    """What the host agent on node1 posts for NCCL RAS finding rank 2 dead and rank 1 unresponsive."""
    comm = "ae94423cfbb2ef4a"
    return {"kind": "nccl_ras", "source": "node1:nccl-ras", "job": job, "start": time.time(),
            "attrs": {"format": "json", "ranks": [
                {"comm": comm, "rank": 2, "state": "dead", "nranks": WORLD, "host": "10.0.0.2", "pid": 77},
                {"comm": comm, "rank": 1, "state": "unresponsive", "nranks": WORLD}]}}


def _who(hang: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(s["rank"], s["state"], s.get("ras_state"), s.get("source", "collectives")) for s in hang["suspects"]]


def test_an_nccl_ras_suspect_after_the_firing_updates_the_alert_and_notifies_once(
        make_service: Callable[..., ServiceProcess]) -> None:
    svc = make_service(**SERVICE_ENV)
    gen, pd = Receiver(free_port()).start(), Receiver(free_port()).start()
    job = f"hang-{uuid.uuid4().hex[:8]}"
    try:
        with client(svc.url) as api:
            for rec, extra in ((gen, {}), (pd, {"format": "pagerduty", "routing_key": "rk-" + uuid.uuid4().hex})):
                r = api.post("/v1/webhooks", json={"url": rec.url, "events": ["job_hang"], **extra})
                assert r.status_code == 201, r.text
            _stage_hung_job(api, job)
            wait_for(lambda: gen.got and pd.got, what="the firing notices")
            first = orjson.loads(gen.got[0].body)
            assert (first["status"], _who(first["alert"]["hang"])) == ("firing", [(2, "not_entered", None,
                                                                                   "collectives")])
            aid = first["alert"]["id"]

            _post(api, "/v1/ingest/events", {"events": [_ras_report(job)]})
            wait_for(lambda: len(gen.got) >= 2 and len(pd.got) >= 2, what="the update notices")
            time.sleep(1.5)  # several more alert and delivery runs: nothing changed, nothing more is sent
            assert len(gen.got) == 2 and len(pd.got) == 2
            doc = orjson.loads(gen.got[1].body)
            want = [(1, "ras_unresponsive", "ras_unresponsive", "nccl_ras"), (2, "not_entered", "ras_dead",
                                                                              "collectives")]
            assert (doc["event"], doc["status"], _who(doc["alert"]["hang"])) == ("job_hang", "updated", want)
            assert doc["alert"]["hang"]["waiting"] == [0] and doc["alert"]["hang"]["revision"] == 1
            assert gen.got[1].headers["idempotency-key"] == f"fabricscope-alert-{aid}-updated-1"
            assert "suspects now: rank 1 (node1) ras_unresponsive (NCCL RAS" in doc["summary"]
            page = orjson.loads(pd.got[1].body)  # PagerDuty folds a trigger on the same dedup_key into the incident
            assert (page["event_action"], page["dedup_key"]) == ("trigger", f"fabricscope-alert-{aid}")
            assert page["payload"]["summary"].startswith(f"[updated] job {job}: hung")
            (listed,) = api.get("/v1/alerts", params={"job": job}).json()
            assert listed["state"] == "firing" and _who(listed["hang"]) == want
            live = api.get(f"/v1/jobs/{job}/hang").json()
            assert [(s["rank"], s["state"], s["ras_state"], s["source"]) for s in live["suspects"]] == want

            _post(api, "/v1/ingest/steps", {"job": job, "steps": [
                {"rank": r, "step": 10, "start": time.time() - DUR, "end": time.time()} for r in range(WORLD)]})
            wait_for(lambda: len(gen.got) >= 3, what="the resolve notice")
            last = orjson.loads(gen.got[2].body)
            assert last["status"] == "resolved"
            assert gen.got[2].headers["idempotency-key"] == f"fabricscope-alert-{aid}-resolved-0"
    finally:
        gen.stop()
        pd.stop()
