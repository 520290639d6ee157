"""Prometheus metrics of fabricscope itself (served at /metrics).

Counters and histograms are updated where the work happens (call sites listed per metric);
queue depths are read from the database at scrape time (`queues.QueueDepthCollector`), so they
are right whichever process did the work.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

# Ingest API (service/api/routes/ingest.py, service/api/main.py).
INGEST_ROWS = Counter("fabricscope_ingest_rows_total", "Rows accepted by the ingest API", ["kind"])
INGEST_SECONDS = Histogram("fabricscope_ingest_request_seconds", "Ingest request latency", ["kind"],
                           buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
INGEST_REJECTED = Counter("fabricscope_ingest_rejected_total", "Ingest requests rejected", ["status"])
DB_UNAVAILABLE = Counter("fabricscope_db_unavailable_total", "Requests answered 503: database unreachable")
# Every HTTP request (observability.access.AccessLog): route template, not the raw path (bounded labels).
HTTP_REQUESTS = Counter("fabricscope_http_requests_total", "HTTP requests answered", ["method", "route", "status"])
HTTP_SECONDS = Histogram("fabricscope_http_request_seconds", "HTTP request latency", ["method", "route"],
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
# Correlation engine: one observation per attributed step, on demand or in the background.
ATTRIBUTION_SECONDS = Histogram("fabricscope_attribution_seconds", "Time to attribute one step",
                                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
ATTRIBUTED_STEPS = Counter("fabricscope_attributed_steps_total", "Steps attributed", ["layer"])
# Webhook deliveries (result: delivered | retrying | failed | expired).
WEBHOOK_DELIVERIES = Counter("fabricscope_webhook_deliveries_total", "Webhook delivery attempts", ["result"])
WEBHOOK_SECONDS = Histogram("fabricscope_webhook_delivery_seconds", "Webhook HTTP attempt latency",
                            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
# Collectors and agents (their own processes: exposed by `serve_metrics` there).
COLLECTOR_UP = Gauge("fabricscope_collector_up", "Last poll of a device succeeded (1) or not (0)", ["device"])
COLLECTOR_SECONDS = Gauge("fabricscope_collector_poll_seconds", "Duration of the last poll", ["device"])
COLLECTOR_POLLS = Counter("fabricscope_collector_polls_total", "Device polls", ["device", "result"])
COLLECTOR_SAMPLES = Counter("fabricscope_collector_samples_total", "Samples produced by polls", ["device"])
SPOOL_BYTES = Gauge("fabricscope_sink_spool_bytes", "Bytes waiting in a collector's outage spool", ["sink"])

DELIVERY_RESULTS = ("delivered", "retrying", "failed", "expired")  # service/alerts/delivery.py states


def observe_poll(device: str, *, ok: bool, seconds: float, samples: int = 0) -> None:
    """One finished poll of `device` (switch collector or host agent)."""
    COLLECTOR_UP.labels(device).set(1 if ok else 0)
    COLLECTOR_SECONDS.labels(device).set(seconds)
    COLLECTOR_POLLS.labels(device, "ok" if ok else "error").inc()
    if samples:
        COLLECTOR_SAMPLES.labels(device).inc(samples)


def forget_device(device: str) -> None:
    """A device left the inventory: drop its series rather than report it down forever."""
    for g in (COLLECTOR_UP, COLLECTOR_SECONDS):
        with suppress(KeyError):
            g.remove(device)


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


def serve_metrics(port: int, addr: str = "127.0.0.1") -> Any:
    """/metrics for processes without the API (collector, agent): `--metrics-port`. Returns the
    server (`.shutdown()`) and its daemon thread."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr)
