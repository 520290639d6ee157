"""Queue depths come from the database at scrape time, and a database outage never fails a scrape."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from prometheus_client import CollectorRegistry, generate_latest

from fabricscope.service.observability.queues import SCRAPE_ERRORS, register_queue_depths
from tests.support import TestDatabase


def _metrics(reg: CollectorRegistry) -> dict[str, float]:
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def test_backlog_deliveries_and_firing_alerts(fresh_database: TestDatabase) -> None:
    url = fresh_database.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO jobs (name) VALUES ('a'), ('b'), ('idle')")
        for job, n in (("a", 10), ("b", 3)):
            conn.execute("""INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s)
                            SELECT %s, r, s, now(), now(), 1 FROM generate_series(0, %s) s, generate_series(0, 1) r""",
                         (job, n - 1))
        conn.execute("""INSERT INTO attributions (job, step, slow, layer)
                        SELECT 'a', s, false, 'none' FROM generate_series(0, 3) s""")
        row = conn.execute("INSERT INTO webhooks (url) VALUES ('http://127.0.0.1:9/') RETURNING id").fetchone()
        assert row is not None
        wid = row[0]
        for i, state in enumerate(("pending", "pending", "delivered")):
            conn.execute("INSERT INTO deliveries (webhook_id, event, idempotency_key, body, state) "
                         "VALUES (%s, 'step_regression', %s, '\\x7b7d', %s)", (wid, f"k{i}", state))
        conn.execute("INSERT INTO alerts (job, state, started_at) VALUES ('a', 'firing', now()), "
                     "('b', 'resolved', now())")

    reg = CollectorRegistry()
    register_queue_depths(lambda: psycopg.connect(url), registry=reg, ttl_s=0)
    got = _metrics(reg)
    assert got['fabricscope_queue_depth{queue="attribution"}'] == 6 + 3  # a: steps 4..9, b: never attributed
    assert got['fabricscope_queue_depth{queue="webhook_deliveries"}'] == 2
    assert got["fabricscope_alerts_firing"] == 1

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO attributions (job, step, slow, layer) SELECT 'b', s, false, 'none' "
                     "FROM generate_series(0, 2) s")
    assert _metrics(reg)['fabricscope_queue_depth{queue="attribution"}'] == 6


def test_cached_between_scrapes_and_silent_when_the_database_is_away(fresh_database: TestDatabase) -> None:
    calls = []

    @contextlib.contextmanager
    def conn() -> Iterator[psycopg.Connection]:
        calls.append(1)
        with psycopg.connect(fresh_database.url) as c:
            yield c

    reg = CollectorRegistry()
    register_queue_depths(conn, registry=reg, ttl_s=60)
    _metrics(reg)
    _metrics(reg)
    assert len(calls) == 1  # one query set per TTL, however often Prometheus scrapes

    def down() -> psycopg.Connection:
        return psycopg.connect("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)

    reg2 = CollectorRegistry()
    register_queue_depths(down, registry=reg2, ttl_s=0)
    errors = SCRAPE_ERRORS._value.get()
    assert not any(k.startswith("fabricscope_queue_depth") for k in _metrics(reg2))
    assert SCRAPE_ERRORS._value.get() == errors + 1
