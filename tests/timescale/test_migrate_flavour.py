"""migrate on TimescaleDB (#47): twice changes nothing (the policies' jobs are the same jobs, so none
runs again at once), onto plain tables that hold rows keeps them, and a server with the package but
no preload runs plain with one line naming the setting, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from fabricscope.core.errors import ConfigError
from fabricscope.service.db.database import migrate
from fabricscope.service.db.embedded import EmbeddedPostgres, has_timescaledb
from fabricscope.service.db.flavour import PRELOAD, detect
from fabricscope.service.settings import Settings
from tests.support import REPO, TestDatabase, free_port

JOBS = ("SELECT job_id, proc_name, hypertable_name, config FROM timescaledb_information.jobs "
        "WHERE job_id >= 1000 ORDER BY 1")


def _settings(url: str, **kw: object) -> Settings:
    return Settings(database_url=url, **kw)  # type: ignore[arg-type]


def test_migrate_twice_keeps_the_same_policy_jobs(ts_db: TestDatabase) -> None:
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        first = conn.execute(JOBS).fetchall()
        migrate(ts_db.url, _settings(ts_db.url))
        again = conn.execute(JOBS).fetchall()
        assert again == first  # a policy removed and added again would be a new job, run at once
        procs = sorted((p, t) for _, p, t, _ in again)
        assert procs == sorted([("policy_compression", "samples"), ("policy_compression", "collectives"),
                                ("policy_retention", "samples"), ("policy_retention", "collectives"),
                                ("policy_retention", "collective_summaries"),
                                ("policy_refresh_continuous_aggregate", "samples_1m")])
        # a changed retention is applied (one policy a table, with the new interval)
        migrate(ts_db.url, _settings(ts_db.url, retention_days=45))
        drops = {t: c["drop_after"] for _, p, t, c in conn.execute(JOBS).fetchall() if p == "policy_retention"}
        assert drops == {"samples": "45 days", "collectives": "45 days", "collective_summaries": "45 days"}
        migrate(ts_db.url, _settings(ts_db.url))


def test_migrate_onto_plain_tables_with_rows(ts_db: TestDatabase) -> None:
    name = f"fs_test_{uuid.uuid4().hex[:10]}"
    admin = ts_db.admin_url
    url = f"{admin.rpartition('/')[0]}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        assert not migrate(url, _settings(url, timescaledb="off")).timescaledb
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO samples (ts, series_id, value, rate) "
                         "SELECT now() - i * INTERVAL '1 hour', 1, i, i FROM generate_series(1, 200) i")
            conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s) "
                         "SELECT 'j', 0, i, now() - i * INTERVAL '1 hour', now(), 1 FROM generate_series(1, 50) i")
        flavour = migrate(url, _settings(url))
        assert flavour.timescaledb and flavour.timescaledb_version
        with psycopg.connect(url, autocommit=True) as conn:
            tables = {r[0] for r in conn.execute("SELECT hypertable_name FROM timescaledb_information.hypertables")}
            assert tables == {"samples", "steps", "collectives", "collective_summaries"}
            assert conn.execute("SELECT count(*), sum(value) FROM ONLY samples").fetchone() == (0, None)  # moved
            assert conn.execute("SELECT count(*), sum(value) FROM samples").fetchone() == (200, 20100.0)
            assert conn.execute("SELECT count(*) FROM steps").fetchone() == (50,)
            chunks = conn.execute("SELECT count(*) FROM timescaledb_information.chunks "
                                  "WHERE hypertable_name = 'samples'").fetchone()
            assert chunks is not None and chunks[0] >= 8  # 200 hours in 1-day chunks
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def unloaded() -> Iterator[EmbeddedPostgres]:
    """An embedded server whose lib holds TimescaleDB, started without preloading it."""
    if not has_timescaledb():
        pytest.skip("TimescaleDB is not installed in the embedded PostgreSQL (.ci/run installs it)")
    emb = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="fabricscope-test-pg-")), free_port(), timescaledb="off")
    emb.start()
    yield emb
    emb.stop()
    shutil.rmtree(emb.data_dir, ignore_errors=True)


def test_without_the_preload_migrate_runs_plain_and_says_what_is_missing(unloaded: EmbeddedPostgres) -> None:
    url = unloaded.dsn()
    with psycopg.connect(url, autocommit=True) as conn:
        f = detect(conn)
        assert not f.timescaledb and f.note and PRELOAD in f.note
        with pytest.raises(ConfigError, match="shared_preload_libraries"):
            detect(conn, mode="require")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
    env["DATABASE_URL"] = url
    r = subprocess.run([sys.executable, "-m", "fabricscope", "migrate"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count(PRELOAD) == 1, r.stderr
    assert "(postgresql:" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fabricscope", "migrate"], cwd=REPO, capture_output=True, text=True,
                       env={**env, "FABRICSCOPE_TIMESCALEDB": "require"}, timeout=120, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr and PRELOAD in r.stderr, r.stderr


def test_the_embedded_server_preloads_it_on_a_data_directory_made_without(unloaded: EmbeddedPostgres) -> None:
    """The module's server was made without the preload: started again the default way, it has it."""
    unloaded.stop()
    emb = EmbeddedPostgres(unloaded.data_dir, unloaded.port)  # timescaledb="auto"
    emb.start()
    try:
        with psycopg.connect(emb.dsn(), autocommit=True) as conn:
            assert detect(conn).timescaledb
        assert migrate(emb.dsn(), _settings(emb.dsn())).timescaledb
    finally:
        emb.stop()
        unloaded.start()
