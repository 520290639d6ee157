"""HTTP ingest in ingest_mode=nats: validate synchronously, publish, writers commit; 503 when NATS is down."""

from __future__ import annotations

import gzip

import httpx
import orjson

from tests.bus import rows
from tests.support import start_service


def test_http_publishes_to_the_bus(nats_server, make_writers, fresh_database, tmp_path) -> None:
    url = fresh_database.url
    svc = start_service(url, tmp_path, env={"FABRICSCOPE_INGEST_MODE": "nats",
                                            "FABRICSCOPE_NATS_URL": nats_server.url})
    try:
        items = rows.sample_items(4000, prefix="hx")
        with httpx.Client(base_url=svc.url, timeout=30) as api:
            # Bad input is still answered by the API itself, field named, nothing published.
            r = api.post("/v1/ingest/samples", json={"samples": [{"ts": 1.7e9, "source": "a", "metric": "x",
                                                                  "value": "NaN?"}]})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "samples", 0, "value"]
            body = orjson.dumps({"batch_id": "h-1", "samples": items[:2000]})
            r = api.post("/v1/ingest/samples", content=gzip.compress(body),
                         headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
            assert r.status_code == 200 and r.json() == {"accepted": 2000}
            r = api.post("/v1/ingest/samples", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200 and r.json() == {"accepted": 2000, "duplicate": True}  # retried batch
            nats_server.kill()
            r = api.post("/v1/ingest/samples", json={"batch_id": "h-2", "samples": items[2000:]})
            assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
            nats_server.start()
            for _ in range(50):  # the client's retry once NATS is back
                r = api.post("/v1/ingest/samples", json={"batch_id": "h-2", "samples": items[2000:]})
                if r.status_code == 200:
                    break
            assert r.status_code == 200, r.text
            r = api.post("/v1/ingest/steps", json={"job": "hj", "steps": [{"rank": 0, "step": 1, "start": 1.7e9,
                                                                            "end": 1.7e9 + 1}]})
            assert r.json() == {"accepted": 1}
        make_writers(url, nats_server.url).start("w1")
        assert rows.wait_count(url, "hx", len(items), 60) == len(items)
        rows.assert_exact(url, "hx", items)
    finally:
        svc.stop()


def test_http_splits_batches_over_max_payload(tmp_path, make_writers, fresh_database) -> None:
    from tests.bus.natsd import NatsServer

    srv = NatsServer(tmp_path / "nats", max_payload=64 * 1024)
    srv.start()
    svc = start_service(fresh_database.url, tmp_path, env={"FABRICSCOPE_INGEST_MODE": "nats",
                                                           "FABRICSCOPE_NATS_URL": srv.url})
    try:
        items = rows.sample_items(20_000, prefix="big")  # ~2 MB of JSON, ~10 messages after splitting
        r = httpx.post(f"{svc.url}/v1/ingest/samples", json={"batch_id": "big-1", "samples": items}, timeout=60)
        assert r.json() == {"accepted": len(items)}
        make_writers(fresh_database.url, srv.url).start("w1")
        assert rows.wait_count(fresh_database.url, "big", len(items), 60) == len(items)
        rows.assert_exact(fresh_database.url, "big", items)
    finally:
        svc.stop()
        srv.stop()


def test_collective_summaries_go_through_the_bus(nats_server, make_writers, fresh_database, tmp_path) -> None:
    import time

    import psycopg

    url = fresh_database.url
    svc = start_service(url, tmp_path, env={"FABRICSCOPE_INGEST_MODE": "nats", "FABRICSCOPE_NATS_URL": nats_server.url})
    item = {"rank": 2, "step": 7, "op": "all_reduce", "bucket": 1024, "count": 3, "total_s": 0.3, "max_s": 0.2,
            "start": 1.7e9, "end": 1.7e9 + 1}
    try:
        with httpx.Client(base_url=svc.url, timeout=30) as api:
            r = api.post("/v1/ingest/collective_summaries", json={"job": "bus-sum", "collective_summaries": [
                dict(item, bucket=1000)]})
            assert r.status_code == 422
            assert r.json()["detail"][0]["loc"] == ["body", "collective_summaries", 0, "bucket"]
            r = api.post("/v1/ingest/collective_summaries", json={"job": "bus-sum", "collective_summaries": [item]})
            assert r.json() == {"accepted": 1}
        make_writers(url, nats_server.url).start("w1")
        deadline = time.monotonic() + 60
        got: list[tuple[object, ...]] = []
        while not got and time.monotonic() < deadline:
            with psycopg.connect(url) as conn:
                got = conn.execute("SELECT rank, step, op, bucket, group_size, count FROM collective_summaries"
                                   " WHERE job = 'bus-sum'").fetchall()
            time.sleep(0.3)
        assert got == [(2, 7, "all_reduce", 1024, 0, 3)]
    finally:
        svc.stop()
