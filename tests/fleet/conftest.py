"""Fleet ledger tests: a database of their own and a real service whose fleet job rolls every 0.3 s
(its alerts off: the tests judge alerts at simulated times through service/fleet/alerts.run_once)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from tests.support import ServiceProcess, TestDatabase, start_service

ENV = {"FABRICSCOPE_FLEET_INTERVAL_S": "0.3", "FABRICSCOPE_FLEET_ALERTS": "false",
       "FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS": "127.0.0.1"}


@pytest.fixture(scope="module")
def fleet_db(test_database: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = TestDatabase.create(test_database.admin_url, tmp_path_factory.mktemp("fleet-pg"))
    yield db.url
    db.drop()


@pytest.fixture(scope="module")
def fleet_svc(fleet_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    svc = start_service(fleet_db, tmp_path_factory.mktemp("fleet-svc"), env=ENV)
    yield svc
    svc.stop()


@pytest.fixture
def api(fleet_svc: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fleet_svc.url, timeout=30) as c:
        yield c


def rolled(db_url: str, timeout_s: float = 30) -> None:
    """Wait until the service's fleet job has rolled everything committed before this call: its
    watermark (the start of the roll's transaction) passes now."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        t0 = row[0]
        while True:
            got = conn.execute("SELECT through > %s FROM fleet_watermark", (t0,)).fetchone()
            if got and got[0]:
                return
            assert time.monotonic() < deadline, "the fleet job did not roll in time"
            time.sleep(0.1)
