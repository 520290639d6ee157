"""Ingest API against the real database: happy paths, field-named 4xx, idempotency, gzip, limits."""

from __future__ import annotations

import gzip
import time
import uuid

import httpx
import orjson
import psycopg
import pytest


def _src() -> str:
    return f"leaf{uuid.uuid4().hex[:6]}:Ethernet1"


def _count(conn: psycopg.Connection, source: str) -> int:
    row = conn.execute("SELECT count(*) FROM sample_view WHERE source = %s", (source,)).fetchone()
    assert row is not None
    return int(row[0])


def test_samples_happy_path_stores_values_and_rates(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    src = _src()
    t0 = time.time() - 60
    body = {"samples": [
        {"ts": t0 + i, "source": src, "metric": "tx_pause_frames_total", "value": 1000 + 50 * i,
         "labels": {"priority": "3"}} for i in range(5)
    ] + [{"ts": t0, "source": src, "metric": "oper_up", "value": 1}]}
    r = api.post("/v1/ingest/samples", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 6, "duplicate": None} or r.json()["accepted"] == 6
    rows = db_conn.execute(
        "SELECT metric, labels, value, rate FROM sample_view WHERE source = %s ORDER BY metric, ts", (src,)
    ).fetchall()
    assert [r[0] for r in rows] == ["oper_up"] + ["tx_pause_frames_total"] * 5
    assert rows[0][3] is None  # gauges get no rate
    assert rows[1][1] == {"priority": "3"}
    assert rows[1][3] is None  # first point of a counter: no previous, no rate
    assert [r[3] for r in rows[2:]] == pytest.approx([50.0] * 4)


def test_rates_continue_across_batches(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    src = _src()
    t0 = time.time() - 100
    for i in range(3):
        r = api.post("/v1/ingest/samples", json={"samples": [
            {"ts": t0 + 10 * i, "source": src, "metric": "rx_bytes_total", "value": 10_000 * i}]})
        assert r.status_code == 200
    rates = [r[0] for r in db_conn.execute(
        "SELECT rate FROM sample_view WHERE source = %s ORDER BY ts", (src,)).fetchall()]
    assert rates == [None, pytest.approx(1000.0), pytest.approx(1000.0)]


def test_rfc3339_timestamps_and_gzip(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    src = _src()
    body = {"samples": [{"ts": "2026-11-30T10:00:00Z", "source": src, "metric": "rx_packets_total", "value": 5},
                        {"ts": "2026-11-30T10:00:02+00:00", "source": src, "metric": "rx_packets_total",
                         "value": 9}]}
    r = api.post("/v1/ingest/samples", content=gzip.compress(orjson.dumps(body)),
                 headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    rates = [r[0] for r in db_conn.execute(
        "SELECT rate FROM sample_view WHERE source = %s ORDER BY ts", (src,)).fetchall()]
    assert rates == [None, pytest.approx(2.0)]


def test_retried_batch_adds_no_rows(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    src = _src()
    bid = uuid.uuid4().hex
    body = {"batch_id": bid, "samples": [{"ts": time.time() - 5, "source": src, "metric": "rx_bytes_total",
                                          "value": 1}]}
    first = api.post("/v1/ingest/samples", json=body)
    second = api.post("/v1/ingest/samples", json=body)
    assert first.status_code == second.status_code == 200
    assert second.json()["duplicate"] is True and second.json()["accepted"] == 1
    assert _count(db_conn, src) == 1


def test_retried_steps_collectives_events_batches_add_nothing(api: httpx.Client,
                                                              db_conn: psycopg.Connection) -> None:
    job = f"job-{uuid.uuid4().hex[:8]}"
    t = time.time() - 30
    bodies = {
        "steps": {"job": job, "batch_id": uuid.uuid4().hex,
                  "steps": [{"rank": 0, "step": 1, "start": t, "end": t + 1.5, "phases": {"data": 0.1}}]},
        "collectives": {"job": job, "batch_id": uuid.uuid4().hex, "collectives": [
            {"rank": 0, "step": 1, "seq": 3, "op": "all_reduce", "bytes": 1 << 20, "start": t + 1, "end": t + 1.2,
             "group": "dp0", "group_size": 4}]},
        "events": {"batch_id": uuid.uuid4().hex, "events": [
            {"kind": "checkpoint", "source": "node01:/ckpt", "job": job, "start": t, "end": t + 3,
             "attrs": {"bytes": 123}}]},
    }
    for kind, body in bodies.items():
        for _ in range(2):
            r = api.post(f"/v1/ingest/{kind}", json=body)
            assert r.status_code == 200, r.text
    assert db_conn.execute("SELECT count(*), max(duration_s) FROM steps WHERE job = %s", (job,)).fetchone() == (
        1, pytest.approx(1.5))
    assert db_conn.execute("SELECT count(*), max(bytes) FROM collectives WHERE job = %s", (job,)).fetchone() == (
        1, 1 << 20)
    assert db_conn.execute("SELECT count(*) FROM events WHERE job = %s", (job,)).fetchone() == (1,)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"samples": [{"ts": 1.7e9, "source": "a", "metric": "x_total", "value": "12"}]},
         ["body", "samples", 0, "value"]),
        ({"samples": [{"ts": 1.7e9, "source": "", "metric": "x_total", "value": 1}]}, ["body", "samples", 0, "source"]),
        ({"samples": [{"ts": 1.7e9, "source": "a", "metric": "Bad-Name", "value": 1}]},
         ["body", "samples", 0, "metric"]),
        ({"samples": [{"ts": 1.7e9, "source": "a", "metric": "m", "value": 1},
                      {"ts": 12.0, "source": "a", "metric": "m", "value": 1}]}, ["body", "samples", 1, "ts"]),
        ({"samples": [{"ts": 4e9, "source": "a", "metric": "m", "value": 1}]}, ["body", "samples", 0, "ts"]),
        ({"samples": [{"ts": "yesterday", "source": "a", "metric": "m", "value": 1}]}, ["body", "samples", 0, "ts"]),
        ({"samples": [{"ts": "2026-01-01T00:00:00", "source": "a", "metric": "m", "value": 1}]},
         ["body", "samples", 0, "ts"]),
        ({"samples": [{"ts": 1.7e9, "source": "a", "metric": "m", "value": 1, "labels": {"p": 3.5}}]},
         ["body", "samples", 0, "labels", "p"]),
        ({"samples": "nope"}, ["body", "samples"]),
        ({}, ["body", "samples"]),
        ([1, 2], ["body"]),
    ],
)
def test_bad_samples_get_422_naming_the_field(api: httpx.Client, body: object, loc: list[object]) -> None:
    r = api.post("/v1/ingest/samples", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc


@pytest.mark.parametrize(
    ("kind", "body", "loc"),
    [
        ("steps", {"steps": []}, ["body", "job"]),
        ("steps", {"job": "j", "steps": [{"rank": -1, "step": 1, "start": 1.7e9, "end": 1.7e9}]},
         ["body", "steps", 0, "rank"]),
        ("steps", {"job": "j", "steps": [{"rank": 0, "step": 1, "start": 1.7e9 + 5, "end": 1.7e9}]},
         ["body", "steps", 0, "end"]),
        ("steps", {"job": "j", "steps": [{"rank": 0, "step": 1, "start": 1.7e9, "end": 1.7e9 + 1,
                                          "phases": {"data": "fast"}}]}, ["body", "steps", 0, "phases", "data"]),
        ("collectives", {"job": "j", "collectives": [{"rank": 0, "op": "", "start": 1.7e9, "end": 1.7e9}]},
         ["body", "collectives", 0, "op"]),
        ("collectives", {"job": "j", "collectives": [{"rank": 0, "op": "x", "bytes": 1.5, "start": 1.7e9,
                                                      "end": 1.7e9}]}, ["body", "collectives", 0, "bytes"]),
        ("events", {"events": [{"kind": "pfc_storm", "source": "a", "start": "never"}]},
         ["body", "events", 0, "start"]),
        ("events", {"events": [{"kind": "pfc_storm", "source": "a", "start": 1.7e9, "attrs": []}]},
         ["body", "events", 0, "attrs"]),
    ],
)
def test_bad_timings_get_422_naming_the_field(api: httpx.Client, kind: str, body: object,
                                              loc: list[object]) -> None:
    r = api.post(f"/v1/ingest/{kind}", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc


def test_invalid_json_and_bad_gzip_are_4xx(api: httpx.Client) -> None:
    r = api.post("/v1/ingest/samples", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
    r = api.post("/v1/ingest/samples", content=b"plain", headers={"Content-Encoding": "gzip",
                                                                  "Content-Type": "application/json"})
    assert r.status_code == 422 and "gzip" in r.json()["detail"][0]["msg"]


def test_batch_over_limit_is_413_and_nothing_written(service_url: str, database_url: str,
                                                     tmp_path, db_conn: psycopg.Connection) -> None:  # type: ignore[no-untyped-def]
    from tests.support import start_service

    svc = start_service(database_url, tmp_path, env={"FABRICSCOPE_MAX_BATCH": "10"})
    try:
        src = _src()
        body = {"samples": [{"ts": time.time() - 1, "source": src, "metric": "m", "value": i} for i in range(11)]}
        r = httpx.post(f"{svc.url}/v1/ingest/samples", json=body)
        assert r.status_code == 413
        assert r.json()["detail"][0]["loc"] == ["body", "samples"]
        assert _count(db_conn, src) == 0
    finally:
        svc.stop()
