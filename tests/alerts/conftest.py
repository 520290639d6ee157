"""Alert tests: each end-to-end test gets a database of its own on the session's PostgreSQL server
(so no other test's jobs or webhooks interfere) and its own real service process."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support import ServiceProcess, TestDatabase, start_service

ADMIN = "adm-token-6a1f"
INGEST = "ing-token-93c2"
READ = "read-token-77d0"

# fast loops so the tests take seconds: the engine and the delivery job every 0.3 s, short backoff
FAST_ENV = {
    "FABRICSCOPE_TOKENS": f"{ADMIN}:admin;{INGEST}:ingest;{READ}:read",
    "FABRICSCOPE_ALERT_INTERVAL_S": "0.3",
    "FABRICSCOPE_DELIVERY_INTERVAL_S": "0.3",
    "FABRICSCOPE_ALERT_STEP_LAG": "1",
    "FABRICSCOPE_ALERT_COOLDOWN_S": "1",
    "FABRICSCOPE_DELIVERY_TIMEOUT_S": "2",
    "FABRICSCOPE_DELIVERY_BACKOFF_S": "0.5",
    "FABRICSCOPE_DELIVERY_BACKOFF_MAX_S": "2",
    # the receivers here are local: admitted through the documented allowlist, not a weaker default
    "FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS": "127.0.0.1",
}


@pytest.fixture
def own_db(test_database: TestDatabase, test_server_url: str | None, tmp_path: Path) -> Iterator[str]:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    yield db.url
    db.drop()


@pytest.fixture
def make_service(own_db: str, tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    started: list[ServiceProcess] = []

    def make(**env: str) -> ServiceProcess:
        svc = start_service(own_db, tmp_path, env={**FAST_ENV, **env})
        started.append(svc)
        return svc

    yield make
    for svc in started:
        svc.stop()


def client(url: str, token: str = ADMIN) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"})


class StepFeed:
    """Posts a job's steps (4 ranks, ~1% per-rank jitter) through the real ingest API."""

    def __init__(self, job: str, *, seed: int = 7, ranks: int = 4, base_s: float = 0.5) -> None:
        self.job, self.ranks, self.base = job, ranks, base_s
        self.rng = np.random.default_rng(seed)
        self.step = 0
        self.t = time.time() - 3600

    def post(self, api: httpx.Client, n: int, *, factor: float = 1.0, batch: int = 50) -> list[float]:
        """Post n steps slowed by `factor`; returns the job step times (max over ranks)."""
        out = []
        for lo in range(0, n, batch):
            items: list[dict[str, Any]] = []
            for _ in range(min(batch, n - lo)):
                d = self.base * factor * self.rng.lognormal(0, 0.01, self.ranks)
                items += [{"rank": r, "step": self.step, "start": self.t, "end": self.t + float(d[r]),
                           "phases": {"forward_backward": float(d[r]) * 0.9}} for r in range(self.ranks)]
                out.append(float(d.max()))
                self.t += float(d.max()) + 0.001
                self.step += 1
            r = api.post("/v1/ingest/steps", json={"job": self.job, "steps": items})
            assert r.status_code == 200, r.text
        return out


def wait_for(pred: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
