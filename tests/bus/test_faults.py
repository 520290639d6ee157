"""Faults mid-stream — a writer SIGKILLed, NATS SIGKILLed and restarted, the database restarted —
and afterwards every published sample is in the database exactly once (count and checksum of
every row, no orphan rows), and the sender dropped nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.sinks.nats import NatsSender
from tests.bus import rows
from tests.bus.natsd import declare_streams

pytestmark = pytest.mark.slow

N = 60_000


class Producer(threading.Thread):
    """Submits items at a steady pace (about 10k/s) through the real NATS sink, with a spool."""

    def __init__(self, url: str, items: list[dict[str, Any]], spool: Path, pause_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.items = items
        self.pause_s = pause_s
        self.sender = NatsSender(url, spool_path=spool, batch_max=1000, flush_interval_s=0.1, max_retries=1,
                                 timeout_s=2)
        self.done = threading.Event()

    def run(self) -> None:
        for i in range(0, len(self.items), 500):
            for it in self.items[i:i + 500]:
                assert self.sender.submit("samples", dict(it))
            time.sleep(self.pause_s)
        self.done.set()

    def finish(self, timeout_s: float = 120) -> dict[str, int]:
        assert self.done.wait(timeout_s)
        deadline = time.monotonic() + timeout_s
        while not self.sender.flush(5) and time.monotonic() < deadline:
            pass
        self.sender.close()
        stats = self.sender.stats
        assert stats["dropped"] == 0 and stats["queued"] == 0 and stats["spool_bytes"] == 0, stats
        return stats


def _wait_rows(url: str, prefix: str, n: int, timeout_s: float = 60) -> None:
    assert rows.wait_count(url, prefix, n, timeout_s) >= n


def test_writer_killed_mid_stream(nats_server, make_writers, fresh_database, tmp_path) -> None:
    url = fresh_database.url
    w = make_writers(url, nats_server.url)
    victim = w.start("w1")
    w.start("w2")
    items = rows.sample_items(N, prefix="kw")
    prod = Producer(nats_server.url, items, tmp_path / "spool")
    prod.start()
    _wait_rows(url, "kw", N // 5)
    os.kill(victim.pid, signal.SIGKILL)  # no clean shutdown: batches in its hands are redelivered
    victim.wait(10)
    w.start("w3")
    prod.finish()
    assert rows.wait_count(url, "kw", N, 90) == N, w.logs()
    time.sleep(2)  # let any redelivery land: it must add nothing
    print("checksum", rows.assert_exact(url, "kw", items))


def test_nats_killed_and_restarted(nats_server, make_writers, fresh_database, tmp_path) -> None:
    url = fresh_database.url
    w = make_writers(url, nats_server.url)
    w.start("w1")
    w.start("w2")
    items = rows.sample_items(N, prefix="kn")
    prod = Producer(nats_server.url, items, tmp_path / "spool")
    prod.start()
    _wait_rows(url, "kn", N // 5)
    nats_server.restart(down_s=2.0)  # SIGKILL, 2 s away, same store directory
    stats = prod.finish()
    assert rows.wait_count(url, "kn", N, 90) == N, w.logs() + "\n" + nats_server.tail()
    time.sleep(2)
    print("sender", stats, "checksum", rows.assert_exact(url, "kn", items))


def test_database_restarted(nats_server, make_writers, fresh_database, tmp_path) -> None:
    if fresh_database.embedded is None:
        pytest.skip("the database is a shared server (FABRICSCOPE_TEST_DATABASE_URL): not ours to restart")
    url = fresh_database.url
    # New series keep appearing until half-way, and the writers drain a backlog (always inside a
    # transaction): the restart cuts transactions that were creating series.
    items = rows.sample_items(N, prefix="kd", n_series=N // 2)
    declare_streams(nats_server.url)
    prod = Producer(nats_server.url, items, tmp_path / "spool", pause_s=0)
    prod.start()
    prod.finish()
    w = make_writers(url, nats_server.url, FABRICSCOPE_WRITER_FETCH="4")
    w.start("w1")
    w.start("w2")
    _wait_rows(url, "kd", N // 5)
    fresh_database.embedded.stop()  # fast shutdown: open transactions are rolled back
    time.sleep(3)
    fresh_database.embedded.start()
    assert rows.wait_count(url, "kd", N, 120) == N, w.logs()
    time.sleep(2)
    print("checksum", rows.assert_exact(url, "kd", items))
    assert "database unavailable" in w.logs()
