"""Prometheus metrics of fabricscope itself (served at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INGEST_ROWS = Counter("fabricscope_ingest_rows_total", "Rows accepted by the ingest API", ["kind"])
INGEST_SECONDS = Histogram("fabricscope_ingest_request_seconds", "Ingest request latency", ["kind"],
                           buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
INGEST_REJECTED = Counter("fabricscope_ingest_rejected_total", "Ingest requests rejected", ["status"])
DB_UNAVAILABLE = Counter("fabricscope_db_unavailable_total", "Requests answered 503: database unreachable")
ATTRIBUTION_SECONDS = Histogram("fabricscope_attribution_seconds", "Time to attribute one step",
                                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
WORKER_QUEUE = Gauge("fabricscope_pending_steps", "Steps waiting for attribution")
WEBHOOK_DELIVERIES = Counter("fabricscope_webhook_deliveries_total", "Webhook delivery attempts", ["result"])
COLLECTOR_UP = Gauge("fabricscope_collector_up", "Last poll of a device succeeded (1) or not (0)", ["device"])
COLLECTOR_SECONDS = Gauge("fabricscope_collector_poll_seconds", "Duration of the last poll", ["device"])
