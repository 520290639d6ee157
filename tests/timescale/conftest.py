"""TimescaleDB suites (#47): a database of their own on the session's server, migrated to the
TimescaleDB flavour, and a real API process on it. Skipped, with the reason, only where the server
has no TimescaleDB (`.ci/run` builds it into the test venv's embedded PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import ServiceProcess, TestDatabase, start_service

ENV = {"FABRICSCOPE_ROLLUP_INTERVAL_S": "0.5"}


@pytest.fixture(scope="module")
def ts_db(test_database: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestDatabase]:
    db = TestDatabase.create(test_database.admin_url, tmp_path_factory.mktemp("ts-pg"))
    try:
        if db.flavour is None or not db.flavour.timescaledb:
            pytest.skip(f"TimescaleDB is not installed in this server ({db.flavour and db.flavour.describe()}): "
                        "`../shared/timescaledb/install.sh PG_CONFIG` installs it (.ci/run does)")
        yield db
    finally:
        db.drop()


@pytest.fixture(scope="module")
def ts_svc(ts_db: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    svc = start_service(ts_db.url, tmp_path_factory.mktemp("ts-svc"), env=ENV)
    yield svc
    svc.stop()


def job_id(conn: psycopg.Connection, proc: str, table: str) -> int:
    row = conn.execute("SELECT job_id FROM timescaledb_information.jobs WHERE proc_name = %s AND hypertable_name = %s",
                       (proc, table)).fetchone()
    assert row is not None, f"no {proc} job on {table}"
    return int(row[0])


def run_policy(conn: psycopg.Connection, proc: str, table: str) -> None:
    """Run a policy's job now (what its schedule would do later), in this session."""
    conn.execute("CALL run_job(%s)", (job_id(conn, proc, table),))


def rolled(db_url: str, job: str, timeout_s: float = 60) -> None:
    """Wait until the service's rollup job has rolled every hour the job's posts marked."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM rollup_pending WHERE job = %s", (job,)).fetchone()
            if row is not None and row[0] == 0:
                return
            assert time.monotonic() < deadline, f"hours of {job} still not rolled"
            time.sleep(0.2)
