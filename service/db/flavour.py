"""Which flavour of the schema a server gets: TimescaleDB or plain PostgreSQL.

TimescaleDB is used when the server has the package *and* preloads it: `CREATE EXTENSION timescaledb`
on a server without ``shared_preload_libraries = 'timescaledb'`` fails ("must be preloaded"), which is
a common first-install state. Such a server runs as plain PostgreSQL, with one warning line that names
the setting; FABRICSCOPE_TIMESCALEDB=require makes it an error instead, and =off never creates the
extension (a database that already holds it stays TimescaleDB: its hypertables need the extension).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import psycopg

from fabricscope.core.errors import ConfigError

Mode = Literal["auto", "require", "off"]
PRELOAD = "shared_preload_libraries = 'timescaledb'"
TIMESCALEDB = "timescaledb"
POSTGRESQL = "postgresql"


@dataclass(frozen=True)
class Flavour:
    name: str  # TIMESCALEDB or POSTGRESQL
    server_version: str  # "18.6"
    timescaledb_version: str | None = None  # the extension's version when name is TIMESCALEDB
    note: str | None = None  # why a server with the package runs plain (printed once as a warning)

    @property
    def timescaledb(self) -> bool:
        return self.name == TIMESCALEDB

    def describe(self) -> str:
        """'TimescaleDB 2.29.2 on PostgreSQL 18.6' or 'PostgreSQL 15.14 (no TimescaleDB)'."""
        if self.timescaledb:
            return f"TimescaleDB {self.timescaledb_version} on PostgreSQL {self.server_version}"
        return f"PostgreSQL {self.server_version} (no TimescaleDB)"


def preloaded(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
    libs = {part.strip().strip('"') for part in (row[0] if row else "").split(",")}
    return TIMESCALEDB in libs


def not_preloaded(version: str) -> str:
    return (f"TimescaleDB {version} is installed on this server but not preloaded: set {PRELOAD} in "
            "postgresql.conf and restart PostgreSQL to use it")


def detect(conn: psycopg.Connection, *, mode: Mode = "auto") -> Flavour:
    """The flavour this database gets (or has); ConfigError where TimescaleDB is needed and unusable."""
    row = conn.execute("SELECT current_setting('server_version')").fetchone()
    server = (row[0] if row else "?").split()[0]
    created = conn.execute("SELECT extversion FROM pg_extension WHERE extname = %s", (TIMESCALEDB,)).fetchone()
    loaded = preloaded(conn)
    if created is not None:
        if not loaded:
            raise ConfigError(f"this database holds the timescaledb extension, but {not_preloaded(created[0])}")
        return Flavour(TIMESCALEDB, server, created[0])
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = %s",
                             (TIMESCALEDB,)).fetchone()
    if mode == "off":
        return Flavour(POSTGRESQL, server)
    if available is not None and loaded:
        return Flavour(TIMESCALEDB, server, available[0])
    note = not_preloaded(available[0]) if available is not None else None
    if mode == "require":
        raise ConfigError((note or f"TimescaleDB is not installed on this PostgreSQL {server}")
                          + " (FABRICSCOPE_TIMESCALEDB=require)")
    return Flavour(POSTGRESQL, server, note=note and f"{note}; running as plain PostgreSQL")


def current(conn: psycopg.Connection) -> Flavour:
    """The flavour a migrated database runs (never raises for a missing preload: for reports)."""
    row = conn.execute("SELECT current_setting('server_version')").fetchone()
    server = (row[0] if row else "?").split()[0]
    created = conn.execute("SELECT extversion FROM pg_extension WHERE extname = %s", (TIMESCALEDB,)).fetchone()
    return Flavour(TIMESCALEDB, server, created[0]) if created else Flavour(POSTGRESQL, server)
