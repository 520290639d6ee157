"""Issue #18, the poison pill: one item the service refuses among 10,000 good ones, through the real
senders (HTTP, NATS JetStream + writer, the agent's spool replayed by a later process, the database
sink). Every good item is stored exactly once (count and checksum), the bad one is counted as
rejected with the service's reason, and nothing is retried: the service refuses the batch naming
the item (422, ``loc`` = ``["body", "samples", i, ...]``) and the sender sends the rest again once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import orjson
import pytest

from fabricscope.collectors.sinks.factory import make_sink
from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.sinks.nats import NatsSender
from fabricscope.collectors.sinks.sender import Sender
from tests.bus import rows
from tests.bus.conftest import Writers
from tests.bus.natsd import NatsServer, declare_streams
from tests.support import ServiceProcess, TestDatabase, free_port, start_service

N_GOOD = 10_000
BAD_AT = 4321  # inside the first batch of 5,000: good items on both sides of it
REASON = "label values are at most 256 characters"


def _items(prefix: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(everything to submit, in order; the good items alone). The bad item's label value is 3,000
    characters that do not compress: before #18 PostgreSQL refused its index entry and the service
    answered 503, which the senders retried and spooled behind."""
    good = rows.sample_items(N_GOOD, prefix=prefix)
    rng = random.Random(3000)
    pill = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(3000))
    bad = {**good[0], "value": -1.0, "labels": {"k": pill}}  # same source prefix: it must not be stored
    return [*good[:BAD_AT], bad, *good[BAD_AT:]], good


def _submit_all(sender: Sender, items: list[dict[str, Any]]) -> None:
    for it in items:
        assert sender.submit("samples", dict(it))


def _metric(base_url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return 0.0


def _posts(base_url: str, status: str) -> int:
    return int(_metric(base_url, "fabricscope_http_requests_total", method="POST", route="/v1/ingest/samples",
                       status=status))


def _check_sender(stats: dict[str, int]) -> None:
    assert stats["sent"] == N_GOOD and stats["rejected"] == 1 and stats["dropped"] == 1, stats
    assert stats["partial_batches"] == 1 and stats["rejected_batches"] == 0, stats
    assert stats["retries"] == 0 and stats["failed_batches"] == 0 and stats["spool_bytes"] == 0, stats


@pytest.fixture
def database(test_database: TestDatabase, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own on the session's server (no second PostgreSQL to start)."""
    db = TestDatabase.create(test_database.admin_url, tmp_path / "db")
    yield db.url
    db.drop()


@pytest.fixture
def service(database: str, tmp_path: Path) -> Iterator[ServiceProcess]:
    (tmp_path / "svc").mkdir()
    svc = start_service(database, tmp_path / "svc")
    yield svc
    svc.stop()


def test_http_sender_keeps_every_good_item(service: ServiceProcess, database: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fabricscope.sender")
    items, good = _items("pph")
    sender = HttpSender(service.url, batch_max=5000, flush_interval_s=60)
    _submit_all(sender, items)
    assert sender.flush(60), sender.stats
    sender.close()
    _check_sender(sender.stats)
    print("http: checksum", rows.assert_exact(database, "pph", good), "posts 200/422:", _posts(service.url, "200"),
          _posts(service.url, "422"), sender.stats)
    # One refusal, one resend of that batch without the bad item, no retry: batches + 1 requests.
    assert _posts(service.url, "422") == 1
    assert _posts(service.url, "200") == sender.stats["sent_batches"] <= 3
    assert f'"loc":["body","samples",{BAD_AT},"labels","k"]' in caplog.text and REASON in caplog.text


def test_spool_replayed_by_a_later_process_keeps_every_good_item(database: str, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The agent's case: the service is away, everything goes to the spool; a restarted agent
    replays it once the service is back, the poison pill included."""
    caplog.set_level(logging.WARNING, logger="fabricscope.sender")
    items, good = _items("pps")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "agent.spool"
    first = HttpSender(url, spool_path=spool, batch_max=5000, flush_interval_s=60, max_retries=0, timeout_s=1)
    _submit_all(first, items)
    assert not first.flush(10)
    first.close()
    assert first.stats["spooled"] == N_GOOD + 1 and first.stats["dropped"] == 0, first.stats
    (tmp_path / "svc").mkdir()
    svc = start_service(database, tmp_path / "svc", port=port)
    try:
        second = HttpSender(url, spool_path=spool, batch_max=5000, flush_interval_s=60, timeout_s=5)
        assert second.flush(60), second.stats
        second.close()
        st = second.stats
        assert st["replayed"] == N_GOOD and st["rejected"] == 1 and st["partial_batches"] == 1, st
        assert st["retries"] == 0 and st["spool_bytes"] == 0 and st["dropped"] == 1, st
        print("spool checksum", rows.assert_exact(database, "pps", good))
        assert _posts(url, "422") == 1 and _posts(url, "200") == st["sent_batches"] <= 3
        assert REASON in caplog.text
    finally:
        svc.stop()


def _dead_letters(url: str) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    async def go() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        nc = await nats.connect(url)
        sub = await nc.jetstream().pull_subscribe("fabricscope.rejected.>", stream="FABRICSCOPE_INGEST_REJECTED")
        out = []
        try:
            for m in await sub.fetch(10, timeout=2):
                out.append((orjson.loads(m.data), orjson.loads((m.headers or {})["Fabricscope-Error"])))
        except nats.errors.TimeoutError:
            pass
        await nc.close()
        return out

    return asyncio.run(go())


def _published(url: str) -> int:
    """Messages the ingest stream ever stored (a work queue: acked ones are gone, their numbers stay)."""
    async def go() -> int:
        nc = await nats.connect(url)
        info = await nc.jetstream().stream_info("FABRICSCOPE_INGEST")
        await nc.close()
        return int(info.state.last_seq)

    return asyncio.run(go())


def test_nats_sender_and_writer_keep_every_good_item(database: str, tmp_path: Path) -> None:
    """Over the bus nobody waits for the answer: the writer stores the good items of the batch
    under its batch id and dead-letters the bad item alone, with the reason."""
    srv = NatsServer(tmp_path / "nats")
    srv.start()
    writers = Writers(database, srv.url, tmp_path)
    try:
        declare_streams(srv.url)
        writers.start("w1")
        items, good = _items("ppn")
        sender = NatsSender(srv.url, batch_max=5000, flush_interval_s=60)
        _submit_all(sender, items)
        assert sender.flush(60), sender.stats
        sender.close()
        st = sender.stats
        assert st["sent"] == N_GOOD + 1 and st["retries"] == 0 and st["dropped"] == 0, st  # JetStream took all
        assert rows.wait_count(database, "ppn", N_GOOD, 60) == N_GOOD, writers.logs()
        dead: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        deadline = time.monotonic() + 30
        while not dead and time.monotonic() < deadline:
            dead = _dead_letters(srv.url)
        assert len(dead) == 1, writers.logs()
        body, reason = dead[0]
        assert body["samples"] == [items[BAD_AT]]
        assert reason == [{"loc": ["body", "samples", BAD_AT, "labels", "k"], "msg": REASON,
                           "type": "string_too_long"}]
        print("nats checksum", rows.assert_exact(database, "ppn", good))
        assert _published(srv.url) == st["sent_batches"] <= 3  # each batch published once
    finally:
        writers.stop_all()
        srv.stop()
    assert "'rejected_items': 1" in writers.logs() and "'rejected': 0" in writers.logs(), writers.logs()


def test_database_sink_keeps_every_good_item(database: str) -> None:
    """The same sender over the database transport (an agent given a DSN) gets the same answer."""
    items, good = _items("ppd")
    sender = make_sink(database, batch_max=5000, flush_interval_s=60)
    _submit_all(sender, items)
    assert sender.flush(60), sender.stats
    sender.close()
    _check_sender(sender.stats)
    print("db sink checksum", rows.assert_exact(database, "ppd", good))
