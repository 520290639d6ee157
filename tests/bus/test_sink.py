"""The sender over the NATS transport — spool while NATS is away, replay, dedupe."""

from __future__ import annotations

import asyncio
import os

import nats
import pytest

from fabricscope.collectors.sinks.factory import make_sink
from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.collectors.sinks.nats import NatsSender, NatsTransport
from fabricscope.core import wire
from fabricscope.core.transport import Batch
from tests.bus.natsd import NatsServer, declare_streams


def _stream_msgs(url: str) -> int:
    async def go() -> int:
        nc = await nats.connect(url)
        info = await nc.jetstream().stream_info("FABRICSCOPE_INGEST")
        await nc.close()
        return int(info.state.messages)

    return asyncio.run(go())


def test_spools_while_nats_is_down_and_replays_in_order(tmp_path) -> None:
    srv = NatsServer(tmp_path / "nats")
    sender = NatsSender(srv.url, spool_path=tmp_path / "spool", batch_max=100, flush_interval_s=0.1,
                        max_retries=0, timeout_s=1)
    try:
        for i in range(250):
            assert sender.submit("samples", {"ts": 1.7e9 + i, "source": "a:b", "metric": "x_total", "value": i})
        assert not sender.flush(5)  # nothing listens yet: kept on disk, not dropped
        assert sender.stats["spooled"] == 250 and sender.stats["dropped"] == 0
        srv.start()
        declare_streams(srv.url)
        assert sender.flush(30), sender.stats
        st = sender.stats
        assert st["replayed"] == 250 and st["spool_bytes"] == 0 and st["dropped"] == 0
        assert _stream_msgs(srv.url) == 3  # batches of 100, 100, 50
    finally:
        sender.close()
        srv.stop()


def test_never_raises_and_counts_what_it_refuses(nats_server) -> None:
    declare_streams(nats_server.url)
    sender = NatsSender(nats_server.url, queue_max=10, flush_interval_s=0.1)
    try:
        assert not sender.submit("nonsense", {})
        for i in range(10):
            sender.submit("samples", {"ts": 1.7e9, "source": "a", "metric": "x", "value": float("nan") if i else 1.0})
        assert not sender.submit("samples", {"ts": 1.7e9, "source": "a", "metric": "x", "value": 1})  # queue full
        assert sender.flush(10)
        assert sender.stats["sent"] == 1 and sender.stats["rejected"] == 9  # NaN is not JSON
        assert _stream_msgs(nats_server.url) == 1
    finally:
        sender.close()


@pytest.mark.parametrize(("url", "cls"), [("nats://u:secret@127.0.0.1:1", NatsTransport),
                                           ("nats://u:secret@127.0.0.1:1,nats://u:secret@127.0.0.1:2", NatsTransport),
                                           ("http://u:secret@127.0.0.1:1", HttpTransport)])
def test_make_sink_picks_the_transport_and_no_secret_in_repr(url, cls, tmp_path) -> None:
    s = make_sink(url, flush_interval_s=60)
    try:
        assert type(s.transport) is cls and "secret" not in repr(s) and "127.0.0.1:1" in repr(s)
    finally:
        s.close(0.5)


def test_nats_outcomes_ok_too_large_retry_and_the_sender_halves(tmp_path) -> None:
    srv = NatsServer(tmp_path / "nats", max_payload=8192)
    srv.start()
    t = NatsTransport(srv.url, timeout_s=1)
    try:
        declare_streams(srv.url)
        items = [{"ts": 1.7e9 + i, "source": f"h:{os.urandom(400).hex()}", "metric": "x", "value": i}
                 for i in range(40)]
        body = wire.batch_body("samples", items, batch_id="big")
        assert t.send(Batch("samples", None, "big", body, wire.dumps(body))).kind == "too_large"
        body = wire.batch_body("samples", items[:1], batch_id="small")
        assert t.send(Batch("samples", None, "small", body, wire.dumps(body))).kind == "ok"
        sender = NatsSender(srv.url, flush_interval_s=60)
        try:
            for it in items:
                sender.submit("samples", it)
            assert sender.flush(10)
            assert sender.stats["sent"] == 40 and sender.stats["split_batches"] > 0
        finally:
            sender.close()
        srv.stop()
        assert t.send(Batch("samples", None, "small2", body, wire.dumps(body))).kind == "retry"
    finally:
        t.close()
        srv.stop()
