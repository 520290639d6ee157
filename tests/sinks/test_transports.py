"""Each transport answers ok / rejected / retry / too_large for what its service said, and the
sender acts on it: one rejected batch is dropped and counted, the batches after it flow on."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from fabricscope.collectors.sinks.http import HttpSender, HttpTransport
from fabricscope.core import wire
from fabricscope.core.transport import Batch
from tests.sinks.receiver import Receiver, Request, accept_all, free_port


@pytest.fixture
def recv() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def samples_batch(*items: dict[str, object]) -> Batch:
    body = wire.batch_body("samples", list(items), batch_id=uuid.uuid4().hex)
    return Batch("samples", None, body["batch_id"], body, wire.dumps(body))


def sample(i: int, source: str = "node1:eth0") -> dict[str, object]:
    return {"ts": time.time() - 60 + i, "source": source, "metric": "rx_bytes_total", "value": float(i)}


@pytest.mark.parametrize(("status", "headers", "kind", "retry_after"), [
    (200, {}, "ok", None),
    (413, {}, "too_large", None),
    (422, {}, "rejected", None),
    (400, {}, "rejected", None),
    (429, {"Retry-After": "7"}, "retry", 7.0),
    (408, {}, "retry", None),
    (503, {"Retry-After": "2"}, "retry", 2.0),
    (500, {}, "retry", None),
])
def test_http_status_becomes_an_outcome(recv: Receiver, status: int, headers: dict[str, str], kind: str,
                                        retry_after: float | None) -> None:
    recv.respond = lambda req: (status, headers, {"detail": "the server's reason"})
    out = HttpTransport(recv.url, timeout_s=2).send(samples_batch(sample(1)))
    assert out.kind == kind and out.retry_after == retry_after
    if kind == "rejected":
        assert "the server's reason" in out.reason


def test_http_no_answer_is_retry_and_job_goes_plain_to_put_jobs(recv: Receiver) -> None:
    out = HttpTransport(f"http://127.0.0.1:{free_port()}", timeout_s=1).send(samples_batch(sample(1)))
    assert out.kind == "retry" and out.retry_after is None
    body = {"ranks": [{"rank": 0, "host": "n1"}]}
    job = Batch("job", "my job/1", "b1", body, wire.dumps(body))
    assert HttpTransport(recv.url).send(job).kind == "ok"
    (req,) = recv.requests
    assert (req.method, req.path, req.body) == ("PUT", "/v1/jobs/my%20job%2F1", body)
    assert "Content-Encoding" not in req.headers


def test_a_422_drops_that_batch_only_and_the_rest_flows_on(recv: Receiver) -> None:
    def reject_bad(req: Request) -> tuple[int, dict[str, str], object]:
        if any(it["source"] == "bad:eth0" for it in req.body["samples"]):
            return 422, {}, {"detail": "samples[0].source: unknown device"}
        return accept_all(req)

    recv.respond = reject_bad
    s = HttpSender(recv.url, flush_interval_s=60, timeout_s=2)
    try:
        for b in range(4):  # one batch per flush: good, bad, good, good
            for i in range(5):
                s.submit("samples", sample(10 * b + i, "bad:eth0" if b == 1 else "node1:eth0"))
            assert s.flush(5)
        st = s.stats
    finally:
        s.close()
    assert [it["value"] for it in recv.items("samples")] == [float(10 * b + i) for b in (0, 2, 3) for i in range(5)]
    assert st["rejected_batches"] == 1 and st["rejected"] == 5 and st["sent"] == 15
    assert st["retries"] == 0 and st["spooled"] == 0 and len(recv.posted("samples")) == 4


def test_db_outcomes(database_url: str) -> None:
    from fabricscope.service.ingest.db_transport import DbTransport

    t = DbTransport(database_url)
    try:
        assert t.send(samples_batch(sample(1, f"db{uuid.uuid4().hex[:6]}:eth0"))).kind == "ok"
        bad = t.send(samples_batch({"ts": "yesterday", "source": "a:b", "metric": "m", "value": 1.0}))
        assert bad.kind == "rejected" and "ts" in bad.reason
        big = t.send(samples_batch(*[sample(i) for i in range(50_001)]))
        assert big.kind == "too_large"
    finally:
        t.close()
    down = DbTransport(f"postgresql://u:pw@127.0.0.1:{free_port()}/x", timeout_s=1)
    assert down.send(samples_batch(sample(1))).kind == "retry"
    assert "pw" not in repr(down)
