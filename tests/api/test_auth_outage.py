"""Bearer-token scopes, and a database outage: 503 + Retry-After, then recovery without restart."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support import TestDatabase, start_service


def test_token_scopes(database_url: str, tmp_path: Path) -> None:
    svc = start_service(database_url, tmp_path,
                        env={"FABRICSCOPE_TOKENS": "s3cret-ingest:ingest;s3cret-read:read;s3cret-admin:admin"})
    try:
        body = {"samples": [{"ts": time.time(), "source": "auth:x", "metric": "m", "value": 1}]}
        url = f"{svc.url}/v1/ingest/samples"
        assert httpx.post(url, json=body).status_code == 401
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer s3cret-read"}).status_code == 403
        assert httpx.post(url, json=body, headers={"Authorization": "Bearer s3cret-ingest"}).status_code == 200
        topo = {"devices": [{"name": "a", "kind": "host"}]}
        r = httpx.put(f"{svc.url}/v1/topology", json=topo, headers={"Authorization": "Bearer s3cret-ingest"})
        assert r.status_code == 403 and "admin" in r.json()["detail"]
        r = httpx.get(f"{svc.url}/v1/topology", headers={"Authorization": "Bearer s3cret-read"})
        assert r.status_code == 200
        assert httpx.get(f"{svc.url}/healthz").status_code == 200  # liveness needs no token
    finally:
        svc.stop()
    assert "s3cret" not in svc.log.read_text()


def test_database_outage_is_503_then_recovers_without_restart(tmp_path: Path) -> None:
    # Always on an embedded server of the test's own: it is stopped and started again mid-run.
    db = TestDatabase.create(None, tmp_path)
    svc = start_service(db.url, tmp_path)
    try:
        url = f"{svc.url}/v1/ingest/samples"

        def post(i: int) -> httpx.Response:
            return httpx.post(url, json={"samples": [{"ts": time.time(), "source": "outage:x",
                                                      "metric": "rx_bytes_total", "value": i}]}, timeout=30)

        assert post(1).status_code == 200
        assert db.embedded is not None
        db.embedded.stop()
        r = post(2)
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) > 0
        assert httpx.get(f"{svc.url}/readyz").status_code == 503
        assert httpx.get(f"{svc.url}/v1/topology").status_code == 503
        # Bad input is still judged as bad input, not as an outage.
        assert httpx.post(url, json={"samples": [{"ts": "x"}]}).status_code == 422
        db.embedded.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and post(3).status_code != 200:
            time.sleep(0.5)
        assert post(4).status_code == 200
        assert httpx.get(f"{svc.url}/readyz").json()["status"] == "ready"
        assert svc.proc.poll() is None  # same process throughout
    finally:
        svc.stop()
        db.drop()


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json"])
def test_operational_endpoints(api: httpx.Client, path: str) -> None:
    r = api.get(path)
    assert r.status_code == 200
    if path == "/metrics":
        assert "fabricscope_ingest_rows_total" in r.text
