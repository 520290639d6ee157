"""The server's commands (`serve`, `migrate`, `db`, `topology`); :mod:`fabricscope.cli` registers them."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import typer

from fabricscope.core.errors import ConfigError
from fabricscope.service.db.lifecycle import database, fail, sigterm_unwinds
from fabricscope.service.observability.logs import setup_logging
from fabricscope.service.settings import get_settings

db_app = typer.Typer(help="The database in use (embedded PostgreSQL unless DATABASE_URL is set).",
                     no_args_is_help=True)
topology_app = typer.Typer(help="Topology (devices, links) files.", no_args_is_help=True)

log = logging.getLogger("fabricscope")


def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on")] = None,
    background: Annotated[bool, typer.Option(help="Run attribution/alert/retention workers")] = True,
) -> None:
    """Run the HTTP API (migrating the database first)."""
    from fabricscope.service.api import server
    from fabricscope.service.api.main import create_app

    settings = get_settings()
    setup_logging(settings.log_level, settings.log_json)
    h, p = host or settings.host, port or settings.port
    if not settings.token_scopes() and not _loopback(h):
        log.warning("authentication is OFF (FABRICSCOPE_TOKENS is unset) and the API listens on %s, not on "
                    "loopback: anyone who can reach port %d can write and read all data. Set FABRICSCOPE_TOKENS "
                    "(docs/security.md), or listen on 127.0.0.1.", h, p)
    with sigterm_unwinds(), database():
        typer.echo(f"fabricscope API on http://{h}:{p}  (docs: http://{h}:{p}/docs)", err=True)
        server.run(create_app(settings, background=background), settings, host=h, port=p)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def migrate_cmd() -> None:
    """Bring the database schema up to date (idempotent)."""
    with database():
        pass


@db_app.command("url")
def db_url(
    show_password: Annotated[bool, typer.Option(
        "--show-password", help="Put the password itself in the DSN (for clients that are not libpq)")] = False,
) -> None:
    """Print the DSN of the database in use, without its password unless asked.

    For the embedded server the DSN names its password file (`?passfile=`), so `psql "$(fabricscope db url)"`
    works as the user who owns that file; for DATABASE_URL the password is shown as `***`."""
    from fabricscope.service.db.database import database_url, embedded_for

    settings = get_settings()
    if settings.database_url is None:
        emb = embedded_for(settings)
        # The flavour on stderr, so `psql "$(fabricscope db url)"` still reads the DSN alone.
        typer.echo(f"flavour: {'timescaledb (preloaded)' if emb.preloads_timescaledb else 'postgresql'}", err=True)
        try:
            typer.echo(emb.dsn() if show_password else emb.url)
        except ConfigError as exc:
            fail(str(exc))
        return
    url = database_url(settings)
    typer.echo(url if show_password else _hide_password(url))


def _hide_password(url: str) -> str:
    """DATABASE_URL with its password masked and every other part (query parameters too) kept."""
    from fabricscope.service.db.database import redact

    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        if parts.password is None:
            return url
        userinfo, _, hostport = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostport}"))
    return redact(url)  # key=value form


@db_app.command("start")
def db_start() -> None:
    """Start the embedded PostgreSQL and leave it running."""
    from fabricscope.service.db.database import embedded_for

    settings = get_settings()
    if settings.database_url is not None:
        fail("DATABASE_URL is set: the embedded server is not in use")
    emb = embedded_for(settings)
    try:
        started = emb.start()
    except ConfigError as exc:
        fail(str(exc))
    typer.echo(f"{'started' if started else 'already running'}: {emb.url}")


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    from fabricscope.service.db.database import embedded_for

    emb = embedded_for(get_settings())
    try:
        stopped = emb.stop()
    except ConfigError as exc:
        fail(str(exc))
    typer.echo("stopped" if stopped else "not running")


@db_app.command("status")
def db_status() -> None:
    """Say whether the embedded PostgreSQL runs."""
    from fabricscope.service.db.database import embedded_for

    emb = embedded_for(get_settings())
    typer.echo(f"{'running' if emb.is_running() else 'stopped'}: {emb.url} (data in {emb.pgdata})")


@db_app.command("info")
def db_info() -> None:
    """The database's flavour and versions; on TimescaleDB its hypertables and chunks, compression, policies."""
    import psycopg

    from fabricscope.service.db.dbinfo import report

    with database(migrate_schema=False) as url:
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                lines = report(conn)
        except psycopg.Error as exc:
            fail(f"database: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    for line in lines:
        typer.echo(line)


@topology_app.command("import")
def topology_import(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Topology YAML")],
    url: Annotated[str | None, typer.Option(help="API base URL; default: write to the database directly")] = None,
    token: Annotated[str | None, typer.Option(envvar="FABRICSCOPE_TOKEN", help="Bearer token (admin)")] = None,
) -> None:
    """Load a topology YAML (see README) and replace the declared topology with it."""
    from fabricscope.service.topology_file import load_topology

    try:
        topo = load_topology(file)
    except ConfigError as exc:
        fail(str(exc))
    body = topo.model_dump(exclude_none=True)
    if url:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = httpx.put(f"{url.rstrip('/')}/v1/topology", json=body, headers=headers, timeout=30)
        if r.status_code >= 400:
            fail(f"the API refused the topology ({r.status_code}): {r.text[:500]}")
        typer.echo(f"imported {len(topo.devices)} devices, {len(topo.links)} links via {url}")
        return
    import psycopg

    from fabricscope.service.db import inventory

    with database() as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        inventory.replace_topology(conn, devices=body["devices"], links=body["links"])
    typer.echo(f"imported {len(topo.devices)} devices, {len(topo.links)} links")
