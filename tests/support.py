"""Test infrastructure: real PostgreSQL (embedded or a server) and a real fabricscope API process."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from fabricscope.service.db.database import migrate
from fabricscope.service.db.embedded import EmbeddedPostgres
from fabricscope.service.db.flavour import Flavour
from fabricscope.service.settings import Settings

REPO = Path(__file__).resolve().parent.parent
# The flavour of every test database made this session, for the terminal summary's line (conftest.py).
FLAVOURS: dict[str, Flavour] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_path(path: Path, timeout_s: float) -> bool:
    """Poll until ``path`` exists (a child process got that far); False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _with_db(url: str, dbname: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{dbname}"


@dataclass
class TestDatabase:
    __test__ = False

    admin_url: str
    name: str
    embedded: EmbeddedPostgres | None = None
    flavour: Flavour | None = None

    @property
    def url(self) -> str:
        return _with_db(self.admin_url, self.name)

    @classmethod
    def create(cls, server_url: str | None, data_dir: Path) -> TestDatabase:
        emb = None
        if server_url is None:
            # Not under pytest's tmp root: pytest keeps it 0700, and as root the server runs as another user.
            emb = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="fabricscope-test-pg-")), free_port())
            emb.start()
            server_url = emb.dsn("postgres")
        name = f"fs_test_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        db = cls(server_url, name, emb)
        db.flavour = migrate(db.url, Settings(database_url=db.url))  # type: ignore[arg-type]
        FLAVOURS[db.flavour.describe()] = db.flavour
        return db

    def drop(self) -> None:
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        except psycopg.Error:
            pass
        if self.embedded is not None:
            self.embedded.stop()
            shutil.rmtree(self.embedded.data_dir, ignore_errors=True)


@dataclass
class ServiceProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


def start_service(database_url: str, log_dir: Path, *, port: int | None = None, env: dict[str, str] | None = None,
                  wait_s: float = 60) -> ServiceProcess:
    port = port or free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
    full_env.update({
        "DATABASE_URL": database_url,
        "FABRICSCOPE_CORRELATE_INTERVAL_S": "0",
        "FABRICSCOPE_ALERT_INTERVAL_S": "0",
        "FABRICSCOPE_DELIVERY_INTERVAL_S": "0",
        "FABRICSCOPE_RETENTION_INTERVAL_S": "0",
        "FABRICSCOPE_FLEET_INTERVAL_S": "0",  # #48: on only where a test asks for the fleet ledger
        "FABRICSCOPE_DB_TIMEOUT_S": "2",
        "FABRICSCOPE_DATA_DIR": str(log_dir / "data"),
        **(env or {}),
    })
    log = log_dir / f"service-{port}.log"
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT,
    )
    svc = ServiceProcess(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited with {proc.returncode}:\n{svc.tail()}")
        try:
            if httpx.get(f"{svc.url}/healthz", timeout=1).status_code == 200:
                return svc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    svc.stop()
    raise RuntimeError(f"service did not start in {wait_s}s:\n{svc.tail()}")


@contextlib.contextmanager
def own_service(test_database: TestDatabase, work: Path, *,
                env: dict[str, str] | None = None) -> Iterator[tuple[ServiceProcess, str]]:
    """A database of its own on the session's server and a `fabricscope serve` on it, for a suite
    whose data or settings others must not see; (service, database URL), both gone afterwards."""
    db = TestDatabase.create(test_database.admin_url, work / "pg")
    try:
        svc = start_service(db.url, work, env=env)
        try:
            yield svc, db.url
        finally:
            svc.stop()
    finally:
        db.drop()
