"""Queue depths read from the database when Prometheus scrapes /metrics.

The work queues live in tables (steps awaiting attribution, webhook deliveries pending), so the
depth is a query, not a gauge some process must remember to set: every API replica reports the
same truth. Each query uses an index and is cached for `ttl_s`; a failing database yields no
sample (and bumps a counter) instead of failing the scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("fabricscope.observability")

SCRAPE_ERRORS = Counter("fabricscope_queue_depth_errors_total", "Queue depth queries that failed")

# Steps past each job's newest attribution (an index-only walk of steps(job, step) per job), and
# deliveries due or waiting for a retry.
ATTRIBUTION_BACKLOG_SQL = """
SELECT coalesce(sum(greatest(s.hi - coalesce(a.hi, s.lo - 1), 0)), 0)
FROM jobs j
CROSS JOIN LATERAL (SELECT max(step) AS hi, min(step) AS lo FROM steps WHERE job = j.name) s
CROSS JOIN LATERAL (SELECT max(step) AS hi FROM attributions WHERE job = j.name) a
"""
DELIVERIES_SQL = "SELECT count(*) FROM deliveries WHERE state = 'pending'"
ALERTS_FIRING_SQL = "SELECT count(*) FROM alerts WHERE state = 'firing'"


class QueueDepthCollector(Collector):
    def __init__(self, connection: Callable[[], AbstractContextManager[Any]], *, ttl_s: float = 10.0) -> None:
        """`connection()` gives a context manager yielding a psycopg connection (e.g. pool.connection)."""
        self._connection = connection
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, float], float] | None = None

    def _read(self) -> tuple[dict[str, float], float] | None:
        with self._lock:
            now = time.monotonic()
            if self._cached and now - self._cached[0] < self._ttl:
                return self._cached[1], self._cached[2]
            try:
                with self._connection() as conn:
                    if not conn.autocommit:  # pooled connection: bound this transaction only
                        conn.execute("SET LOCAL statement_timeout = '2s'")
                    depth = {"attribution": float(conn.execute(ATTRIBUTION_BACKLOG_SQL).fetchone()[0]),
                             "webhook_deliveries": float(conn.execute(DELIVERIES_SQL).fetchone()[0])}
                    firing = float(conn.execute(ALERTS_FIRING_SQL).fetchone()[0])
            except Exception as exc:  # a scrape must never fail because the database is away
                SCRAPE_ERRORS.inc()
                log.warning("queue depth query failed: %s", type(exc).__name__)
                return None
            self._cached = (now, depth, firing)
            return depth, firing

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("fabricscope_queue_depth", "Items waiting in a work queue", labels=["queue"])
        yield GaugeMetricFamily("fabricscope_alerts_firing", "Step-regression alerts firing")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        got = self._read()
        if got is None:
            return
        depth, firing = got
        g = GaugeMetricFamily("fabricscope_queue_depth", "Items waiting in a work queue", labels=["queue"])
        for queue, value in depth.items():
            g.add_metric([queue], value)
        yield g
        yield GaugeMetricFamily("fabricscope_alerts_firing", "Step-regression alerts firing", value=firing)


def register_queue_depths(connection: Callable[[], AbstractContextManager[Any]],
                          registry: CollectorRegistry = REGISTRY, **kw: Any) -> QueueDepthCollector:
    """Register once per process (the app's lifespan); returns the collector to unregister on exit."""
    c = QueueDepthCollector(connection, **kw)
    registry.register(c)
    return c
