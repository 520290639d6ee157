"""The observability helpers: poll/delivery/attribution metrics, the access log, a metrics server."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from fabricscope.service.observability import metrics as m
from fabricscope.service.observability.access import AccessLog
from fabricscope.service.observability.logs import JsonFormatter, request_id_var


def _v(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_delivery_results_are_a_closed_set() -> None:
    before = _v("fabricscope_webhook_deliveries_total", result="retrying")
    m.observe_delivery("retrying", 0.3)
    assert _v("fabricscope_webhook_deliveries_total", result="retrying") == before + 1
    with pytest.raises(ValueError, match="delivery result"):
        m.observe_delivery("ok")


def test_attribution_timer_observes_even_when_it_raises() -> None:
    n = _v("fabricscope_attribution_seconds_count")
    with m.attribution_timer() as out:
        out["layer"] = "fabric"
    with pytest.raises(RuntimeError), m.attribution_timer():
        raise RuntimeError("engine failed")
    assert _v("fabricscope_attribution_seconds_count") == n + 2
    assert _v("fabricscope_attributed_steps_total", layer="fabric") >= 1


def test_access_log_is_json_with_request_id_and_route_template() -> None:
    app = FastAPI()

    @app.get("/v1/jobs/{job}")
    def get_job(job: str) -> dict[str, str]:
        return {"job": job}

    app.add_middleware(AccessLog)  # added first = innermost: runs inside the request-id middleware

    @app.middleware("http")
    async def rid(request: Request, call_next: Any) -> Any:  # as service/api/main.py does
        token = request_id_var.set(request.headers.get("x-request-id", "none"))
        try:
            return await call_next(request)
        finally:
            request_id_var.reset(token)

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("fabricscope.access")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        before = _v("fabricscope_http_requests_total", method="GET", route="/v1/jobs/{job}", status="200")
        with TestClient(app) as client:
            assert client.get("/v1/jobs/secret-job-name", headers={"x-request-id": "req-42"}).status_code == 200
            assert client.get("/nope").status_code == 404
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    first = lines[0]
    assert first["request_id"] == "req-42" and first["logger"] == "fabricscope.access"
    assert first["http"] == {"method": "GET", "route": "/v1/jobs/{job}", "status": 200,
                             "duration_ms": first["http"]["duration_ms"]}
    assert "secret-job-name" not in lines[0]["msg"]  # the template, not the path: no names in logs/labels
    assert lines[1]["http"]["status"] == 404 and lines[1]["http"]["route"] == "unmatched"
    assert _v("fabricscope_http_requests_total", method="GET", route="/v1/jobs/{job}", status="200") == before + 1
