"""A background job survives both an outage (one warning line) and a bug (logged with its traceback)."""

from __future__ import annotations

import logging
import socket

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from fabricscope.service.bus.leases import LeaseLost
from fabricscope.service.workers import _guarded


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_database_outage_is_one_warning_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"postgresql://nobody@127.0.0.1:{_closed_port()}/none?connect_timeout=1"
    caplog.set_level(logging.WARNING, "fabricscope.workers")
    with ConnectionPool(dead, min_size=0, max_size=1, timeout=0.5, open=True) as pool:
        _guarded(pool, "retention", lambda conn: None)()
    [record] = [r for r in caplog.records if r.name == "fabricscope.workers"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage().startswith("retention failed: PoolTimeout")


def test_lost_lease_is_expected(database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    def steal(conn: psycopg.Connection) -> None:
        raise LeaseLost("correlate:job-a now held by another worker")

    caplog.set_level(logging.WARNING, "fabricscope.workers")
    with ConnectionPool(database_url, min_size=1, max_size=1, open=True) as pool:
        _guarded(pool, "attribution", steal)()
    [record] = [r for r in caplog.records if r.name == "fabricscope.workers"]
    assert record.levelno == logging.WARNING and "LeaseLost" in record.getMessage()


def test_bug_in_a_job_is_logged_with_traceback(database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    def buggy(conn: psycopg.Connection) -> None:
        conn.execute("SELECT 1")
        {}["missing"]  # noqa: B018 - the bug under test

    caplog.set_level(logging.WARNING, "fabricscope.workers")
    with ConnectionPool(database_url, min_size=1, max_size=1, open=True) as pool:
        _guarded(pool, "alerts", buggy)()  # must not raise: the scheduler keeps the job
    [record] = [r for r in caplog.records if r.name == "fabricscope.workers"]
    assert record.levelno == logging.ERROR and record.getMessage() == "alerts crashed"
    assert record.exc_info is not None and record.exc_info[0] is KeyError
