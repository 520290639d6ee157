"""Sink → JetStream → `fabricscope writer` → PostgreSQL, against a real nats-server and database."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import nats
import orjson
import psycopg

from fabricscope.collectors.sinks.nats import NatsSender
from fabricscope.service.bus import codec, stream
from fabricscope.service.settings import Settings
from tests.bus import rows
from tests.bus.natsd import declare_streams


def _publish_raw(url: str, subject: str, payload: bytes, headers: dict[str, str] | None = None) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await stream.ensure_streams(js, Settings())  # a writer may not have declared it yet
        await js.publish(subject, payload, headers=headers)
        await nc.close()

    asyncio.run(go())


def _rejected(url: str, stream: str = "FABRICSCOPE_INGEST_REJECTED") -> list[tuple[str, list[dict[str, Any]]]]:
    async def go() -> list[tuple[str, list[dict[str, Any]]]]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        sub = await js.pull_subscribe("fabricscope.rejected.>", stream=stream)
        out = []
        try:
            for m in await sub.fetch(10, timeout=2):
                out.append((m.subject, orjson.loads((m.headers or {})["Fabricscope-Error"])))
        except nats.errors.TimeoutError:
            pass
        await nc.close()
        return out

    return asyncio.run(go())


def test_sink_to_writer_exact_rows_and_duplicates(nats_server, make_writers, fresh_database) -> None:
    url = fresh_database.url
    w = make_writers(url, nats_server.url)
    w.start("w1")
    declare_streams(nats_server.url)  # before the writer process is up, a sender would get "no responders"
    items = rows.sample_items(12_000, prefix="sx")
    sender = NatsSender(nats_server.url, batch_max=1000, flush_interval_s=0.2)
    for it in items:
        assert sender.submit("samples", dict(it))
    assert sender.flush(30), sender.stats
    sender.close()
    assert sender.stats["sent"] == len(items) and sender.stats["dropped"] == 0
    # The same batch published twice more: once inside the NATS duplicate window (dropped by
    # JetStream), once with another message id (reaches a writer; the database claim drops it).
    dup_items = rows.sample_items(50, prefix="sdup")
    subj, data, headers = codec.encode("samples", {"batch_id": "dup-1", "samples": dup_items})
    _publish_raw(nats_server.url, subj, data, headers)
    _publish_raw(nats_server.url, subj, data, headers)
    _publish_raw(nats_server.url, subj, data, {**headers, codec.MSG_ID: "other-id"})
    assert rows.wait_count(url, "sx", len(items), 60) == len(items), w.logs()
    assert rows.wait_count(url, "sdup", 50, 30) == 50, w.logs()
    rows.assert_exact(url, "sx", items)
    rows.assert_exact(url, "sdup", dup_items)


def test_bad_batches_dead_lettered_good_ones_kept(nats_server, make_writers, fresh_database) -> None:
    url = fresh_database.url
    w = make_writers(url, nats_server.url)
    w.start("w1")
    good = rows.sample_items(300, prefix="sgood")
    bad_metric = {"batch_id": "bad-1", "samples": [{"ts": 1.7e9, "source": "x:y", "metric": "Bad-Name", "value": 1}]}
    for subj, payload, headers in [
        codec.encode("samples", {"batch_id": "g1", "samples": good[:150]}),
        codec.encode("samples", bad_metric),
        ("fabricscope.ingest.samples", b"{not json", {codec.MSG_ID: "junk"}),
        ("fabricscope.ingest.steps", gzip.compress(b"[]"), {"Content-Encoding": "gzip"}),
        codec.encode("samples", {"samples": good[150:]}),  # no batch id from the sender: the codec adds one
    ]:
        _publish_raw(nats_server.url, subj, payload, headers)
    assert rows.wait_count(url, "sgood", 300, 60) == 300, w.logs()
    rows.assert_exact(url, "sgood", good)
    dead = []
    for _ in range(20):
        dead = _rejected(nats_server.url)
        if len(dead) == 3:
            break
    assert sorted(s for s, _ in dead) == ["fabricscope.rejected.samples", "fabricscope.rejected.samples",
                                          "fabricscope.rejected.steps"], w.logs()
    reasons = [r[0] for _, r in dead]
    assert ["body", "samples", 0, "metric"] in [r["loc"] for r in reasons]
    assert any(r["type"] == "json_invalid" for r in reasons)


def test_steps_collectives_events_jobs_through_the_bus(nats_server, make_writers, fresh_database) -> None:
    url = fresh_database.url
    make_writers(url, nats_server.url).start("w1")
    declare_streams(nats_server.url)  # before the writer process is up, a sender would get "no responders"
    sender = NatsSender(nats_server.url, flush_interval_s=0.1)
    sender.put_job("jb", {"ranks": [{"rank": 0, "host": "node01", "gpu": "gpu0", "nic": "mlx5_0"}]})
    t = 1.7e9
    for r in range(2):
        sender.submit("steps", {"rank": r, "step": 1, "start": t, "end": t + 1.5}, job="jb")
        sender.submit("collectives", {"rank": r, "step": 1, "seq": 0, "op": "all_reduce", "bytes": 1 << 20,
                                      "start": t + 0.5, "end": t + 0.9}, job="jb")
    sender.submit("events", {"kind": "checkpoint", "source": "node01:/mnt/ckpt", "start": t, "end": t + 3}, job="jb")
    assert sender.flush(20)
    sender.close()
    with psycopg.connect(url) as conn:
        for _ in range(100):
            counts = [conn.execute(q).fetchone()[0] for q in (  # type: ignore[index]
                "SELECT count(*) FROM job_ranks WHERE job = 'jb'", "SELECT count(*) FROM steps WHERE job = 'jb'",
                "SELECT count(*) FROM collectives WHERE job = 'jb'", "SELECT count(*) FROM events WHERE job = 'jb'")]
            if counts == [1, 2, 2, 1]:
                break
            asyncio.run(asyncio.sleep(0.2))
        assert counts == [1, 2, 2, 1]
