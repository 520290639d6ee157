"""Trends tests: a database of their own on the session's PostgreSQL server and a real service
whose rollup job runs every half second, fed through the HTTP API."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from tests.support import ServiceProcess, TestDatabase, start_service

ENV = {"FABRICSCOPE_ROLLUP_INTERVAL_S": "0.5", "FABRICSCOPE_TRENDS_MAX_SERIES": "3",
       "FABRICSCOPE_TRENDS_MAX_POINTS": "400"}


@pytest.fixture(scope="module")
def trends_db(test_database: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = TestDatabase.create(test_database.admin_url, tmp_path_factory.mktemp("trends-pg"))
    yield db.url
    db.drop()


@pytest.fixture(scope="module")
def trends_svc(trends_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    svc = start_service(trends_db, tmp_path_factory.mktemp("trends-svc"), env=ENV)
    yield svc
    svc.stop()


@pytest.fixture
def api(trends_svc: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=trends_svc.url, timeout=30) as c:
        yield c


@pytest.fixture
def suite() -> str:
    """A label value of this test's own: its jobs, and only they, match `label.suite=`."""
    return uuid.uuid4().hex[:10]


def settled(db_url: str, *jobs: str, timeout_s: float = 30) -> None:
    """Wait until the service's rollup job has rolled every hour these jobs' posts marked (a mark
    is deleted in the transaction that rolls its hour, so none left means all rolled)."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM rollup_pending WHERE job = ANY(%s)", (list(jobs),)).fetchone()
            if row is not None and row[0] == 0:
                return
            assert time.monotonic() < deadline, f"{row[0] if row else '?'} hours of {jobs} still not rolled"
            time.sleep(0.2)
