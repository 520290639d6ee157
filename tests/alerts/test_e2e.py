"""End to end through real processes: steps via the ingest API -> the service's alert engine ->
the persistent delivery queue -> a real local HTTP receiver. Each test has its own database and
service (tests/alerts/conftest.py)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from tests.alerts.conftest import READ, StepFeed, client, wait_for
from tests.alerts.receiver import GarbageServer, Receiver, free_port
from tests.support import ServiceProcess

SECRET = "whsec-" + uuid.uuid4().hex


def _alerts(api: httpx.Client, job: str, state: str | None = None) -> list[dict[str, Any]]:
    params = {"job": job} | ({"state": state} if state else {})
    r = api.get("/v1/alerts", params=params)
    assert r.status_code == 200, r.text
    return list(r.json())


def test_regression_fires_one_alert_one_signed_delivery_and_recovery_resolves(
        make_service: Callable[..., ServiceProcess]) -> None:
    svc = make_service()
    rec = Receiver(free_port()).start()
    job = f"job-{uuid.uuid4().hex[:6]}"
    try:
        with client(svc.url) as api:
            r = api.post("/v1/webhooks", json={"url": rec.url, "secret": SECRET, "events": ["step_regression"],
                                               "name": "ops"})
            assert r.status_code == 201, r.text
            hook = r.json()
            assert "secret" not in hook and hook["has_secret"] is True and SECRET not in r.text
            feed = StepFeed(job)
            feed.post(api, 200)
            time.sleep(1.5)
            assert _alerts(api, job) == [] and rec.got == []  # healthy: nothing
            feed.post(api, 1, factor=20)  # one pathological step never pages anyone
            feed.post(api, 30)
            time.sleep(1.5)
            assert _alerts(api, job) == []
            first_slow = feed.step
            feed.post(api, 60, factor=1.05)  # a sustained 5% regression
            alert = wait_for(lambda: _alerts(api, job, "firing"), what="a firing alert")[0]
            assert alert["since_step"] >= first_slow - 5 and alert["detected_step"] - first_slow < 50
            assert alert["current_s"] / alert["baseline_s"] == pytest.approx(1.05, abs=0.02)
            assert alert["regression"] == pytest.approx(0.05, abs=0.02)
            assert alert["lost_s"] > 0 and alert["attribution"]["available"] is False  # engine off: degrades
            wait_for(lambda: rec.got, what="the delivery")
            got = rec.got[0]
            sig = "sha256=" + hmac.new(SECRET.encode(), got.body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(got.headers["x-fabricscope-signature"], sig)
            doc = orjson.loads(got.body)
            assert doc["status"] == "firing" and doc["alert"]["id"] == alert["id"] and doc["alert"]["job"] == job
            assert got.headers["idempotency-key"] == doc["idempotency_key"]
            # recovery resolves it; the resolve notice is held for the 1 s cooldown, then sent
            feed.post(api, 60)
            wait_for(lambda: _alerts(api, job, "resolved"), what="the alert to resolve")
            wait_for(lambda: len(rec.got) >= 2, what="the resolved delivery")
            time.sleep(2)
            assert [orjson.loads(g.body)["status"] for g in rec.got] == ["firing", "resolved"]
            assert len({g.headers["idempotency-key"] for g in rec.got}) == 2
            alerts = _alerts(api, job)
            assert len(alerts) == 1 and alerts[0]["state"] == "resolved" and alerts[0]["resolved_step"] > first_slow
            r = api.get(f"/v1/webhooks/{hook['id']}/deliveries")
            assert r.status_code == 200, r.text
            log = r.json()
            assert [(d["status"], d["state"], d["attempts"]) for d in log] == [("resolved", "delivered", 1),
                                                                                ("firing", "delivered", 1)]
            assert log[0]["attempt_log"][0]["status"] == 200
            # read scope sees alerts but not webhooks
            with client(svc.url, READ) as reader:
                assert reader.get("/v1/alerts").status_code == 200
                assert reader.get("/v1/webhooks").status_code == 403
            assert SECRET not in api.get("/v1/webhooks").text
    finally:
        rec.stop()
    text = svc.log.read_text()
    assert SECRET not in text
    assert "s3cr3t-path" not in text  # the URL path may be a credential (Slack): logs show the host only


def test_receiver_down_then_up_across_a_restart_delivers_exactly_once(
        make_service: Callable[..., ServiceProcess], own_db: str) -> None:
    port = free_port()
    job = f"job-{uuid.uuid4().hex[:6]}"
    svc = make_service()
    with client(svc.url) as api:
        hook = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/in", "secret": SECRET}).json()
        feed = StepFeed(job, seed=9)
        feed.post(api, 150)
        feed.post(api, 50, factor=1.08)
        wait_for(lambda: _alerts(api, job, "firing"), what="a firing alert")

        def attempted() -> bool:
            log = api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()
            return bool(log) and log[0]["attempts"] >= 2 and log[0]["state"] == "pending"

        wait_for(attempted, what="failed attempts while the receiver is down")
    svc.stop()  # restart with the delivery still queued
    rec = Receiver(port).start()
    try:
        svc2 = make_service()
        with client(svc2.url) as api:
            feed.post(api, 30, factor=1.08)  # still regressed: the restored detector must not fire again
            wait_for(lambda: rec.got, timeout=30, what="delivery after the receiver came back")
            time.sleep(3)
            keys = [g.headers["idempotency-key"] for g in rec.got]
            assert len(keys) == 1, keys
            assert len(_alerts(api, job)) == 1
            log = api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()
            assert len(log) == 1 and log[0]["state"] == "delivered" and log[0]["attempts"] >= 3
            assert all(a["status"] is None and a["error"] for a in log[0]["attempt_log"][:-1])
    finally:
        rec.stop()
    with psycopg.connect(own_db) as conn:
        assert conn.execute("SELECT count(*) FROM deliveries WHERE state <> 'delivered'").fetchone() == (0,)


@pytest.mark.slow
def test_slow_500_and_garbage_receivers_retry_boundedly_and_never_block_ingest(
        make_service: Callable[..., ServiceProcess]) -> None:
    svc = make_service(FABRICSCOPE_DELIVERY_MAX_AGE_S="8", FABRICSCOPE_DELIVERY_TIMEOUT_S="3")
    slow = Receiver(free_port(), mode="slow", slow_s=60).start()
    err = Receiver(free_port(), mode="500").start()
    junk = GarbageServer(free_port())
    good = Receiver(free_port()).start()
    job = f"job-{uuid.uuid4().hex[:6]}"
    try:
        with client(svc.url) as api:
            ids = {}
            for name, url in (("slow", slow.url), ("err", err.url), ("junk", junk.url), ("good", good.url)):
                ids[name] = api.post("/v1/webhooks", json={"url": url, "secret": SECRET, "name": name}).json()["id"]
            feed = StepFeed(job, seed=5)
            feed.post(api, 150)
            feed.post(api, 40, factor=1.1)
            wait_for(lambda: _alerts(api, job, "firing"), what="a firing alert")
            wait_for(lambda: slow.got, what="the slow receiver to be hanging on a delivery")
            # while a delivery hangs on the slow receiver, ingest answers promptly
            worst = 0.0
            for _ in range(10):
                t0 = time.monotonic()
                feed.post(api, 5, factor=1.1)
                worst = max(worst, time.monotonic() - t0)
            assert worst < 2.0, f"ingest took {worst:.1f}s while a receiver hung"
            wait_for(lambda: good.got, what="the good receiver despite the bad ones")

            def settled() -> bool:
                return all(api.get(f"/v1/webhooks/{i}/deliveries").json()[0]["state"] != "pending"
                           for n, i in ids.items() if n != "good")

            wait_for(settled, timeout=40, what="bad deliveries to be given up after the max age")
            for name in ("slow", "err", "junk"):
                d = api.get(f"/v1/webhooks/{ids[name]}/deliveries").json()[0]
                assert d["state"] == "failed" and 2 <= d["attempts"] <= 10, (name, d)
                assert len(d["attempt_log"]) == d["attempts"]
                assert "maximum age" in d["last_error"]
            errs = [a["error"] for a in api.get(f"/v1/webhooks/{ids['slow']}/deliveries").json()[0]["attempt_log"]]
            assert all("Timeout" in e for e in errs), errs
            assert {a["status"] for a in api.get(f"/v1/webhooks/{ids['err']}/deliveries").json()[0]["attempt_log"]} \
                == {500}
            n_err = len(err.got)
            time.sleep(2)
            assert len(err.got) == n_err  # given up: no more attempts
            assert junk.connections >= 2 and len(good.got) == 1
    finally:
        for r in (slow, err, good):
            r.stop()
        junk.stop()
