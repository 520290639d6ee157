"""HttpSender against a real HTTP server on 127.0.0.1: batching, gzip, retries, 413 split,
outage -> spool -> replay in order, bounds and drop counting."""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricscope.collectors.sinks.http import HttpSender
from tests.sinks.receiver import Receiver, Request, accept_all

TOKEN = "s3cr3t-token-value"


@pytest.fixture
def recv() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def sender(url: str, **kw: object) -> HttpSender:
    kw.setdefault("flush_interval_s", 0.05)
    kw.setdefault("timeout_s", 2.0)
    return HttpSender(url, **kw)  # type: ignore[arg-type]


def sample(i: int) -> dict[str, object]:
    return {"ts": 1700000000.0 + i, "source": "node1:eth0", "metric": "rx_bytes_total", "value": i}


def test_batches_are_gzipped_json_with_unique_ids_and_bearer_token(recv: Receiver) -> None:
    s = sender(recv.url, token=TOKEN)
    for i in range(3):
        assert s.submit("samples", sample(i))
    assert s.submit("steps", {"rank": 0, "step": 1, "start": 1.0, "end": 2.0}, job="j1")
    assert s.submit("collectives", {"rank": 0, "op": "all_reduce", "start": 1.0, "end": 1.5}, job="j1")
    assert s.submit("events", {"kind": "checkpoint", "source": "h", "start": 1.0}, job="j1")
    assert s.flush(5)
    s.close()
    reqs = recv.requests
    kinds = ("samples", "steps", "collectives", "events")
    assert {r.path for r in reqs} == {f"/v1/ingest/{k}" for k in kinds}
    for r in reqs:
        assert r.method == "POST"
        assert r.headers["Content-Encoding"] == "gzip"
        assert r.raw[:2] == b"\x1f\x8b"  # really gzip on the wire
        assert json.loads(gzip.decompress(r.raw)) == r.body
        assert r.headers["Authorization"] == f"Bearer {TOKEN}"
    assert len({r.body["batch_id"] for r in reqs}) == len(reqs)
    assert [x["value"] for x in recv.items("samples")] == [0, 1, 2]
    steps = recv.posted("steps")[0].body
    assert steps["job"] == "j1" and steps["steps"][0]["step"] == 1
    assert recv.posted("collectives")[0].body["job"] == "j1"
    assert recv.items("events")[0]["job"] == "j1"  # events carry the job per event
    assert s.stats["sent"] == 6 and s.stats["dropped"] == 0


def test_batch_max_splits_the_queue(recv: Receiver) -> None:
    s = sender(recv.url, batch_max=10, flush_interval_s=10)
    for i in range(25):
        s.submit("samples", sample(i))
    assert s.flush(5)
    s.close()
    assert [len(r.body["samples"]) for r in recv.posted("samples")] == [10, 10, 5]
    assert [x["value"] for x in recv.items("samples")] == list(range(25))


def test_5xx_is_retried_with_the_same_batch_id(recv: Receiver) -> None:
    answers = iter([503, 502])

    def flaky(req: Request) -> tuple[int, dict[str, str], object]:
        status = next(answers, 200)
        return (status, {}, {"detail": "db down"}) if status != 200 else accept_all(req)

    recv.respond = flaky
    s = sender(recv.url, max_retries=3)
    s.submit("samples", sample(1))
    assert s.flush(10)
    s.close()
    reqs = recv.posted("samples")
    assert [r.status for r in reqs] == [503, 502, 200]
    assert len({r.body["batch_id"] for r in reqs}) == 1
    assert s.stats["retries"] == 2 and s.stats["sent"] == 1


def test_429_retry_after_is_honoured(recv: Receiver) -> None:
    calls: list[float] = []

    def limited(req: Request) -> tuple[int, dict[str, str], object]:
        calls.append(time.monotonic())
        if len(calls) == 1:
            return 429, {"Retry-After": "1"}, {"detail": "slow down"}
        return accept_all(req)

    recv.respond = limited
    s = sender(recv.url)
    s.submit("samples", sample(1))
    assert s.flush(10)
    s.close()
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.95


def test_4xx_drops_the_batch_logs_the_detail_and_never_the_token(
    recv: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    def reject(req: Request) -> tuple[int, dict[str, str], object]:
        return 422, {}, {"detail": "samples[0].value: not a number"}

    recv.respond = reject
    caplog.set_level(logging.DEBUG, logger="fabricscope")
    s = sender(recv.url, token=TOKEN)
    s.submit("samples", sample(1))
    s.submit("samples", sample(2))
    s.flush(5)
    s.close()
    assert len(recv.posted("samples")) == 1  # not retried
    assert s.stats["rejected"] == 2 and s.stats["dropped"] == 2 and s.stats["rejected_batches"] == 1
    assert "samples[0].value: not a number" in caplog.text
    assert TOKEN not in caplog.text and TOKEN not in repr(s)


def test_413_splits_the_batch_until_it_fits(recv: Receiver) -> None:
    def limit(req: Request) -> tuple[int, dict[str, str], object]:
        if len(req.body["samples"]) > 4:
            return 413, {}, {"detail": "batch over 4 items"}
        return accept_all(req)

    recv.respond = limit
    s = sender(recv.url)
    for i in range(10):
        s.submit("samples", sample(i))
    assert s.flush(5)
    s.close()
    assert [x["value"] for x in recv.items("samples")] == list(range(10))
    assert s.stats["split_batches"] >= 2 and s.stats["sent"] == 10 and s.stats["dropped"] == 0


def test_outage_spools_then_replays_in_order(recv: Receiver, tmp_path: Path) -> None:
    s = sender(recv.url, spool_path=tmp_path / "spool.jsonl", max_retries=1)
    for i in range(5):
        s.submit("samples", sample(i))
    assert s.flush(5)
    recv.stop()  # the service goes away: connection refused
    for i in range(5, 15):
        s.submit("samples", sample(i))
        assert s.flush(5) is False  # never raises, says it could not deliver
    assert s.stats["spooled"] == 10
    assert (tmp_path / "spool.jsonl").stat().st_size > 0
    recv.start()  # back on the same port
    for i in range(15, 20):
        s.submit("samples", sample(i))
    assert s.flush(10)
    s.close()
    assert [x["value"] for x in recv.items("samples")] == list(range(20))
    assert s.stats["replayed"] == 10 and s.stats["dropped"] == 0
    assert (tmp_path / "spool.jsonl").stat().st_size == 0


def test_a_busy_service_is_waited_for_not_counted_as_down(recv: Receiver, tmp_path: Path) -> None:
    """After an outage the spool is replayed even when the service first answers 429: a service that
    answers is up, so the probe waits Retry-After and tries again instead of reopening the circuit."""
    s = sender(recv.url, spool_path=tmp_path / "spool.jsonl", max_retries=2)
    recv.stop()
    for i in range(3):
        s.submit("samples", sample(i))
    assert s.flush(5) is False and s.stats["spooled"] == 3
    busy_left = [2]

    def busy_then_ok(req: Request) -> tuple[int, dict[str, str], object]:
        if busy_left[0]:
            busy_left[0] -= 1
            return 429, {"Retry-After": "0.2"}, {"detail": "ingest queue full"}
        return accept_all(req)

    recv.respond = busy_then_ok
    recv.start()
    assert s.flush(10)  # one forced probe: it meets two 429s and still delivers
    s.close()
    assert [x["value"] for x in recv.items("samples")] == [0, 1, 2]
    assert [r.status for r in recv.posted("samples")][:3] == [429, 429, 200]
    assert s.stats["replayed"] == 3 and s.stats["dropped"] == 0


def test_spool_survives_the_process_and_replays_at_next_start(recv: Receiver, tmp_path: Path) -> None:
    url = recv.url
    recv.stop()
    spool = tmp_path / "rank0.jsonl"
    s1 = sender(url, spool_path=spool, max_retries=0)
    s1.put_job("j", {"ranks": [{"rank": 0, "host": "h"}]})
    for i in range(7):
        s1.submit("steps", {"rank": 0, "step": i, "start": float(i), "end": i + 0.5}, job="j")
    t0 = time.monotonic()
    s1.close(timeout_s=3)
    assert time.monotonic() - t0 < 5  # the exit of a training process is not held hostage
    assert s1.stats["spooled"] == 8
    lines = [json.loads(x) for x in spool.read_text().splitlines()]
    assert all(rec["batch_id"] for rec in lines)
    recv.start()
    s2 = sender(url, spool_path=spool)
    assert s2.flush(10)
    s2.close()
    assert [r.method for r in recv.requests] == ["PUT", "POST"]  # same order as submitted
    assert recv.requests[0].path == "/v1/jobs/j"
    assert [x["step"] for x in recv.items("steps")] == list(range(7))
    assert s2.stats["replayed"] == 8


def test_bounded_spool_drops_and_counts(recv: Receiver, tmp_path: Path) -> None:
    url = recv.url
    recv.stop()
    spool = tmp_path / "s.jsonl"
    s = sender(url, spool_path=spool, spool_max_bytes=2000, max_retries=0)
    for i in range(60):
        s.submit("samples", sample(i))
        s.flush(2)  # one batch per item
    st = s.stats
    assert spool.stat().st_size <= 2000
    assert st["dropped_spool_full"] > 0 and st["spooled"] > 0
    assert st["spooled"] + st["dropped"] == 60
    recv.start()
    assert s.flush(10)
    s.close()
    got = [x["value"] for x in recv.items("samples")]
    assert len(got) == st["spooled"] and got == sorted(got)  # what was kept arrives, in order
    assert got == list(range(len(got)))  # the oldest are kept, the newest dropped


def test_queue_full_drops_and_counts_without_blocking(recv: Receiver) -> None:
    s = sender(recv.url, queue_max=10, batch_max=1000, flush_interval_s=30)
    t0 = time.perf_counter()
    results = [s.submit("samples", sample(i)) for i in range(25)]
    assert time.perf_counter() - t0 < 0.5
    assert results.count(True) == 10 and results.count(False) == 15
    assert s.stats["dropped_queue_full"] == 15
    assert s.flush(5)
    s.close()
    assert len(recv.items("samples")) == 10


def test_bad_items_never_raise(recv: Receiver) -> None:
    s = sender(recv.url)
    assert s.submit("nonsense", sample(0)) is False
    assert s.submit("samples", {"ts": 1.0, "source": "a", "metric": "m", "value": float("nan")})
    assert s.submit("samples", {"ts": 1.0, "source": "a", "metric": "m", "value": Path("/x")})
    assert s.submit("samples", sample(3))
    assert s.flush(5)
    s.close()
    got = recv.items("samples")
    assert [x["value"] for x in got] == ["/x", 3]  # the NaN item alone is dropped, and counted
    assert s.stats["rejected"] == 1
    assert s.submit("samples", sample(4)) is False  # closed: refused, counted
    s.close()  # twice is fine


def test_close_with_a_hanging_service_is_bounded(tmp_path: Path) -> None:
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)  # accepts connections, never answers
    try:
        s = sender(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=0.5, spool_path=tmp_path / "s",
                   max_retries=5)
        for i in range(3):
            s.submit("samples", sample(i))
        t0 = time.monotonic()
        s.close(timeout_s=1.0)
        assert time.monotonic() - t0 < 4
        assert s.stats["spooled"] + s.stats["dropped"] == 3
    finally:
        srv.close()


def test_a_large_batch_arrives_intact(recv: Receiver) -> None:
    # Over the chunk size the body is encoded piecewise (the GIL is let go in between).
    s = sender(recv.url, flush_interval_s=10)
    for i in range(1300):
        s.submit("collectives", {"rank": 1, "op": "all_reduce", "seq": i, "start": 1.0, "end": 2.0}, job="big")
    assert s.flush(10)
    s.close()
    (req,) = recv.posted("collectives")
    assert req.body["job"] == "big" and req.body["batch_id"]
    assert [c["seq"] for c in req.body["collectives"]] == list(range(1300))
