"""Shared fixtures. The database is a real PostgreSQL: embedded (default) or the server named by
FABRICSCOPE_TEST_DATABASE_URL (CI also runs the suite against the machine's PostgreSQL 15)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from hypothesis import settings

from tests.support import FLAVOURS, ServiceProcess, TestDatabase, start_service

# Property tests in `make test` (and CI) replay the same examples every run: no deadline, since a
# loaded 2-core machine makes any per-example deadline a coin toss, and derandomized, so a run passes
# or fails on the code and not on the draw. `pytest --hypothesis-profile=explore` searches anew
# (random draws, ten times the examples) and is how new counterexamples are found.
settings.register_profile("repeatable", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=1000, print_blob=True)
settings.load_profile(os.environ.get("FABRICSCOPE_HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def test_server_url() -> str | None:
    return os.environ.get("FABRICSCOPE_TEST_DATABASE_URL") or None


@pytest.fixture(scope="session")
def test_database(tmp_path_factory: pytest.TempPathFactory, test_server_url: str | None) -> Iterator[TestDatabase]:
    db = TestDatabase.create(test_server_url, tmp_path_factory.mktemp("pg"))
    yield db
    db.drop()


@pytest.fixture(scope="session")
def database_url(test_database: TestDatabase) -> str:
    """A migrated, empty-at-start database shared by the session."""
    return test_database.url


@pytest.fixture(scope="session")
def service(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    svc = start_service(database_url, tmp_path_factory.mktemp("svc"))
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def service_url(service: ServiceProcess) -> str:
    """Base URL of a real fabricscope API process (uvicorn) on 127.0.0.1, no auth."""
    return service.url


@pytest.fixture
def api(service_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service_url, timeout=30) as client:
        yield client


@pytest.fixture
def db_conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def fresh_database(tmp_path: Path, test_server_url: str | None) -> Iterator[TestDatabase]:
    """A database of the test's own (for tests that stop the server or need an empty schema)."""
    db = TestDatabase.create(test_server_url, tmp_path / "pg")
    yield db
    db.drop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`root` suites (network namespaces, veth, tc, cgroups, snmpd/netconfd as peers) need root;
    as another user they are skipped with that reason instead of failing on permissions."""
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces, veth, tc, real peers): run `sudo bash .ci/run`")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line naming the database flavour the tests ran on, for CI's log (#47): TimescaleDB when the
    test venv's embedded PostgreSQL has it installed (.ci/run does), else plain PostgreSQL."""
    if not FLAVOURS:
        return
    stats = terminalreporter.stats
    ran = sum(len([r for r in stats.get(k, []) if getattr(r, "when", "call") == "call"])
              for k in ("passed", "failed", "xfailed", "xpassed"))
    no_ts = sum(1 for r in stats.get("skipped", []) if "timescaledb" in str(getattr(r, "longrepr", "")).lower())
    terminalreporter.write_line(f"database flavour: {', '.join(sorted(FLAVOURS))}; {ran} tests ran, "
                                f"{no_ts} skipped for lack of TimescaleDB")
