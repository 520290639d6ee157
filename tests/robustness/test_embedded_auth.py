"""The embedded PostgreSQL asks every client for a password (#18): new clusters are made with SCRAM,
old `trust` clusters are upgraded on their next start, and `db url` never prints the password unasked."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from fabricscope.service.db.database import database_url
from fabricscope.service.db.embedded import EmbeddedPostgres
from fabricscope.service.settings import Settings
from tests.support import REPO, free_port


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not under pytest's tmp root: pytest keeps it 0700, and as root the server runs as another user.
    d = Path(tempfile.mkdtemp(prefix="fabricscope-auth-"))
    yield d
    EmbeddedPostgres(d, 0).stop()
    shutil.rmtree(d, ignore_errors=True)


def _settings(data_dir: Path, port: int) -> Settings:
    return Settings(data_dir=data_dir, embedded_port=port)


def _refused(host: str, port: int, password: str = "") -> str:
    """Log in as the superuser with no password from anywhere else (env, ~/.pgpass); return the error."""
    with pytest.raises(psycopg.OperationalError) as err:
        psycopg.connect(host=host, port=port, user="postgres", dbname="postgres", password=password,
                        passfile="/nonexistent", connect_timeout=5)
    return str(err.value)


def _assert_locked(emb: EmbeddedPostgres) -> None:
    for host in ("127.0.0.1", str(emb._socket_dir())):  # TCP, then the unix socket
        assert "no password supplied" in _refused(host, emb.port)  # the server asked for one
        assert "password authentication failed" in _refused(host, emb.port, "not-it")
    hba = (emb.pgdata / "pg_hba.conf").read_text()
    assert not [ln for ln in hba.splitlines() if ln.split()[:1] in (["local"], ["host"]) and "trust" in ln.split()]


def test_new_cluster_requires_the_password_kept_0600(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    emb = EmbeddedPostgres(data_dir, free_port())
    with caplog.at_level(logging.DEBUG):
        emb.start()
    _assert_locked(emb)
    assert stat.S_IMODE(emb.passfile.stat().st_mode) == 0o600
    password = emb.password()
    with psycopg.connect(database_url(_settings(data_dir, emb.port)), connect_timeout=5) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("fabricscope",)
    with psycopg.connect(emb.url, connect_timeout=5) as conn:  # the printable URL: libpq reads the passfile
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert password not in emb.url
    assert password not in caplog.text
    assert password not in (emb.pgdata / "server.log").read_text()
    assert not list(data_dir.glob(".pwfile-*"))  # initdb's one-off password file is gone


def test_old_trust_cluster_is_upgraded_on_start_and_keeps_its_data(data_dir: Path) -> None:
    emb = EmbeddedPostgres(data_dir, free_port())
    if os.geteuid() == 0:
        emb._prepare_root()
    # The cluster as the code before #18 made it: initdb --auth=trust, no password anywhere.
    r = emb._run("initdb", ["-D", str(emb.pgdata), "--auth=trust", "-U", "postgres", "-E", "UTF8"], timeout=120)
    assert r.returncode == 0, r.stderr
    opts = f"-h 127.0.0.1 -p {emb.port} -k {emb._socket_dir()}"
    r = emb._run("pg_ctl", ["-D", str(emb.pgdata), "-w", "-l", str(emb.pgdata / "server.log"), "-o", opts, "start"])
    assert r.returncode == 0, r.stderr
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{emb.port}/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE fabricscope")
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{emb.port}/fabricscope", autocommit=True) as conn:
        conn.execute("CREATE TABLE kept AS SELECT 42 AS v")
    assert emb.stop()
    assert not emb.passfile.exists()

    assert emb.start()
    _assert_locked(emb)
    assert stat.S_IMODE(emb.passfile.stat().st_mode) == 0o600
    with psycopg.connect(database_url(_settings(data_dir, emb.port)), connect_timeout=5) as conn:
        assert conn.execute("SELECT v FROM kept").fetchone() == (42,)
    # A second start (no longer trust) keeps the same password and does not touch the role again.
    password = emb.password()
    emb.stop()
    emb.start()
    assert emb.password() == password
    _assert_locked(emb)


def _cli(data_dir: Path, port: int, *args: str, database_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRICSCOPE_", "PG")) and k != "DATABASE_URL"}
    env.update(FABRICSCOPE_DATA_DIR=str(data_dir), FABRICSCOPE_EMBEDDED_PORT=str(port))
    if database_url:
        env["DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "fabricscope", "db", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_db_url_hides_the_password_unless_asked(data_dir: Path) -> None:
    emb = EmbeddedPostgres(data_dir, free_port())
    emb.start()
    password = emb.password()
    out = _cli(data_dir, emb.port, "url")
    assert out.returncode == 0, out.stderr
    shown = out.stdout.strip()
    assert password not in shown and f"passfile={emb.passfile}" in shown
    with psycopg.connect(shown, connect_timeout=5) as conn:  # `psql "$(fabricscope db url)"` works as it is
        assert conn.execute("SELECT current_database()").fetchone() == ("fabricscope",)
    revealed = _cli(data_dir, emb.port, "url", "--show-password")
    assert revealed.returncode == 0 and password in revealed.stdout
    for cmd in ("status", "start"):
        out = _cli(data_dir, emb.port, cmd)
        assert out.returncode == 0 and password not in out.stdout + out.stderr, out.stderr

    external = "postgresql://app:hunter2@db.example:5433/fs?sslmode=require"
    out = _cli(data_dir, emb.port, "url", database_url=external)
    assert out.stdout.strip() == "postgresql://app:***@db.example:5433/fs?sslmode=require"
    assert _cli(data_dir, emb.port, "url", "--show-password", database_url=external).stdout.strip() == external
