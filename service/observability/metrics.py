"""Prometheus metrics of fabricscope itself (served at /metrics).

Collector processes export their own metrics from their own registry
(:mod:`fabricscope.collectors.selfmetrics`). Counters and histograms are updated where the work
happens (call sites listed per metric); queue depths are read from the database at scrape time
(`queues.QueueDepthCollector`), so they are right whichever process did the work.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Histogram

# Ingest API (service/api/routes/ingest.py, service/api/main.py).
INGEST_ROWS = Counter("fabricscope_ingest_rows_total", "Rows accepted by the ingest API", ["kind"])
INGEST_SECONDS = Histogram("fabricscope_ingest_request_seconds", "Ingest request latency", ["kind"],
                           buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
INGEST_REJECTED = Counter("fabricscope_ingest_rejected_total", "Ingest requests rejected", ["status"])
DB_UNAVAILABLE = Counter("fabricscope_db_unavailable_total", "Requests answered 503: database unreachable")
# Load, not an outage: 429 because every database connection was in use ("pool") or the server was
# at its connection limit ("connections").
BUSY_REJECTED = Counter("fabricscope_busy_rejected_total", "Requests answered 429: server busy", ["reason"])
# Every HTTP request (observability.access.AccessLog): route template, not the raw path (bounded labels).
HTTP_REQUESTS = Counter("fabricscope_http_requests_total", "HTTP requests answered", ["method", "route", "status"])
HTTP_SECONDS = Histogram("fabricscope_http_request_seconds", "HTTP request latency", ["method", "route"],
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# Correlation engine: one observation per attributed step, on demand or in the background.
ATTRIBUTION_SECONDS = Histogram("fabricscope_attribution_seconds", "Time to attribute one step",
                                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
ENGINE_INVARIANT_VIOLATIONS = Counter(
    "fabricscope_engine_invariant_violations_total",
    "Answers that broke an engine invariant (service/correlate/invariants.py): an engine bug", ["invariant"])
ATTRIBUTED_STEPS = Counter("fabricscope_attributed_steps_total", "Steps attributed", ["layer"])
# Background passes of the engine over pending steps (service/workers.py), by what started them:
# "interval" (the scheduled safety net) or "arrival" (ingest woke the worker, service/arrival.py).
ATTRIBUTION_PASSES = Counter("fabricscope_attribution_passes_total", "Background attribution passes", ["trigger"])
# Webhook deliveries (result: delivered | retrying | failed | expired).
WEBHOOK_DELIVERIES = Counter("fabricscope_webhook_deliveries_total", "Webhook delivery attempts", ["result"])
WEBHOOK_SECONDS = Histogram("fabricscope_webhook_delivery_seconds", "Webhook HTTP attempt latency",
                            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
DELIVERY_RESULTS = ("delivered", "retrying", "failed", "expired")  # service/alerts/delivery.py states


def observe_delivery(result: str, seconds: float | None = None) -> None:
    if result not in DELIVERY_RESULTS:
        raise ValueError(f"delivery result must be one of {DELIVERY_RESULTS}, not {result!r}")
    WEBHOOK_DELIVERIES.labels(result).inc()
    if seconds is not None:
        WEBHOOK_SECONDS.observe(seconds)


@contextmanager
def attribution_timer() -> Iterator[dict[str, str]]:
    """`with attribution_timer() as out: ...; out["layer"] = a["layer"]` around one step's attribution."""
    out: dict[str, str] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        ATTRIBUTION_SECONDS.observe(time.perf_counter() - t0)
        if "layer" in out:
            ATTRIBUTED_STEPS.labels(out["layer"]).inc()
