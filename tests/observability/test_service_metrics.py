"""/metrics, /healthz, /readyz and request ids of the real API process."""

from __future__ import annotations

import re
import time

import httpx

from tests.support import free_port


def _value(text: str, name: str, labels: str = "") -> float:
    pat = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" ([0-9.e+-]+)"
    m = re.search(r"^" + pat + r"$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_ingest_rows_latency_and_rejections_are_counted(api: httpx.Client) -> None:
    before = api.get("/metrics").text
    now = time.time()
    src = f"obs{free_port()}:eth0"
    body = {"samples": [{"ts": now - 2 + i, "source": src, "metric": "rx_bytes_total", "value": 100 * i}
                        for i in range(3)]}
    assert api.post("/v1/ingest/samples", json=body).status_code == 200
    assert api.post("/v1/ingest/samples", json={"samples": [{"ts": "yesterday", "source": src}]}).status_code == 422
    after = api.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    a, b = after.text, before
    assert _value(a, "fabricscope_ingest_rows_total", 'kind="samples"') - \
        _value(b, "fabricscope_ingest_rows_total", 'kind="samples"') == 3
    assert _value(a, "fabricscope_ingest_request_seconds_count", 'kind="samples"') - \
        _value(b, "fabricscope_ingest_request_seconds_count", 'kind="samples"') >= 1
    for declared in ("fabricscope_attribution_seconds", "fabricscope_webhook_deliveries_total",
                     "fabricscope_db_unavailable_total"):
        assert f"# TYPE {declared}" in a
    assert "fabricscope_collector_" not in a  # collector processes export those, from their own registry


def test_health_readiness_and_request_ids(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready" and ready.json()["database_revision"]
    # the flavour and its versions (#47): "TimescaleDB 2.29.2 on PostgreSQL 18.6" / "PostgreSQL 15.14 (no ...)"
    flavour = {"timescaledb": r"TimescaleDB \d+\.\d+\.\d+ on PostgreSQL \d+", "postgresql": r"PostgreSQL \d+\S* \(no "}
    assert re.match(flavour[ready.json()["flavour"]], ready.json()["database_version"]), ready.json()
    r = api.get("/healthz", headers={"X-Request-Id": "abc123"})
    assert r.headers["x-request-id"] == "abc123"
    assert len(api.get("/healthz").headers["x-request-id"]) >= 8  # generated when the client sends none
