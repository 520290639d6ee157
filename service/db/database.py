"""Which database is in use, the connection pool, and migrations."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from fabricscope.service.db.embedded import EmbeddedPostgres
from fabricscope.service.db.flavour import Flavour, current, detect
from fabricscope.service.settings import Settings

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(str(resources.files("fabricscope.migrations")))


def embedded_for(settings: Settings) -> EmbeddedPostgres:
    return EmbeddedPostgres(settings.data_dir, settings.embedded_port, timescaledb=settings.timescaledb)


def database_url(settings: Settings) -> str:
    """The DSN in use: DATABASE_URL when set, else the embedded server's (whether or not it runs).

    The embedded DSN carries the password once the server has one; before its first start it names
    the password file that the start will create. Either way it is a secret: print ``redact(url)``."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    emb = embedded_for(settings)
    return emb.dsn() if emb.passfile.exists() else emb.url


def redact(url: str) -> str:
    """A DSN safe to print: the password, if any, replaced."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in info:
        info["password"] = "***"
    host = info.get("host", "")
    user = info.get("user", "")
    pw = ":***" if "password" in info else ""
    port = f":{info['port']}" if "port" in info else ""
    return f"postgresql://{user}{pw}@{host}{port}/{info.get('dbname', '')}"


def make_pool(url: str, settings: Settings) -> ConnectionPool:
    """A pool that survives a database outage: connections are checked on checkout, so once the
    server is back requests succeed again without restarting the service. At most pool_max_waiting
    requests queue for a connection; the next one gets TooManyRequests at once (429, not a wait)."""
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=settings.pool_size,
        max_waiting=settings.pool_max_waiting,
        timeout=settings.db_timeout_s,
        open=False,
        check=ConnectionPool.check_connection,
        # How long the pool keeps re-opening a connection it lost (psycopg_pool's backoff: 1, 2, 4 s...).
        # 0 is not "forever": it gives up after the second failed attempt, and after a database restart
        # under load the pool then stayed empty for good, every request 429 "40 requests waiting"
        # (bench/soak.py: 0 connections in pg_stat_activity, the senders' spools never replayed).
        reconnect_timeout=3600,
        kwargs={"connect_timeout": max(1, int(settings.db_timeout_s))},
    )
    pool.open(wait=False)
    return pool


def pool_full(pool: ConnectionPool) -> bool:
    """Whether the pool holds all the connections it may: a wait that timed out then is load, not an
    outage. In an outage the pool drops each connection found broken and cannot open new ones."""
    return pool.get_stats()["pool_size"] >= pool.max_size


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, settings: Settings) -> Flavour:
    """Bring the schema to head, then (re)apply the idempotent SQL for TimescaleDB or plain PG.

    The flavour is decided before alembic runs, so a server that has TimescaleDB's package but does not
    preload it fails nowhere: it gets the plain flavour and one warning line (:mod:`.flavour`)."""
    from alembic import command

    with psycopg.connect(url, autocommit=True) as conn:
        flavour = detect(conn, mode=settings.timescaledb)
    if flavour.note:
        log.warning("%s", flavour.note)
    command.upgrade(_alembic_config(url), "head")
    with psycopg.connect(url, autocommit=True) as conn:
        if flavour.timescaledb:
            sql = (MIGRATIONS_DIR / "sql" / "timescale.sql").read_text()
            sql = sql.replace(":retention_days", str(settings.retention_days))
            sql = sql.replace(":compress_after_days", str(settings.compress_after_days))
        else:
            sql = (MIGRATIONS_DIR / "sql" / "plain.sql").read_text()
        conn.execute(sql.encode())
        return current(conn) if flavour.timescaledb else flavour


def current_revision(conn: psycopg.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return row[0] if row else None


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config("postgresql://unused/x")).get_current_head()
    assert head is not None
    return head
