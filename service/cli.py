"""The `fabricscope` command."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from collectors.errors import ConfigError
from service.observability.logs import setup_logging
from service.settings import get_settings

app = typer.Typer(help="fabricscope: why was step N slow?", no_args_is_help=True, add_completion=False)
db_app = typer.Typer(help="The database in use (embedded PostgreSQL unless DATABASE_URL is set).",
                     no_args_is_help=True)
topology_app = typer.Typer(help="Topology (devices, links) files.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(topology_app, name="topology")

log = logging.getLogger("fabricscope")


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def database(*, migrate_schema: bool = True) -> Iterator[str]:
    """Yield the DSN in use; start (and afterwards stop) the embedded server when it is the default."""
    from service.db.database import database_url, embedded_for, migrate, redact

    settings = get_settings()
    started = False
    emb = None
    try:
        if settings.database_url is None:
            emb = embedded_for(settings)
            started = emb.start()
            typer.echo(f"database: embedded PostgreSQL at {emb.url} (data in {emb.pgdata})", err=True)
        url = database_url(settings)
        if migrate_schema:
            flavour = migrate(url, settings)
            typer.echo(f"database: {redact(url)} schema current ({flavour})", err=True)
        yield url
    except ConfigError as exc:
        _fail(str(exc))
    finally:
        if started and emb is not None:
            emb.stop()
            typer.echo("database: embedded PostgreSQL stopped", err=True)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on")] = None,
    background: Annotated[bool, typer.Option(help="Run attribution/alert/retention workers")] = True,
) -> None:
    """Run the HTTP API (migrating the database first)."""
    import uvicorn

    from service.api.main import create_app

    settings = get_settings()
    setup_logging(settings.log_level, settings.log_json)
    with database():
        h, p = host or settings.host, port or settings.port
        typer.echo(f"fabricscope API on http://{h}:{p}  (docs: http://{h}:{p}/docs)", err=True)
        uvicorn.run(create_app(settings, background=background), host=h, port=p, log_level="warning",
                    access_log=False)


@app.command("migrate")
def migrate_cmd() -> None:
    """Bring the database schema up to date (idempotent)."""
    with database():
        pass


@db_app.command("url")
def db_url() -> None:
    """Print the DSN of the database in use."""
    from service.db.database import database_url

    typer.echo(database_url(get_settings()))


@db_app.command("start")
def db_start() -> None:
    """Start the embedded PostgreSQL and leave it running."""
    from service.db.database import embedded_for

    settings = get_settings()
    if settings.database_url is not None:
        _fail("DATABASE_URL is set: the embedded server is not in use")
    emb = embedded_for(settings)
    try:
        started = emb.start()
    except ConfigError as exc:
        _fail(str(exc))
    typer.echo(f"{'started' if started else 'already running'}: {emb.url}")


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    from service.db.database import embedded_for

    emb = embedded_for(get_settings())
    try:
        stopped = emb.stop()
    except ConfigError as exc:
        _fail(str(exc))
    typer.echo("stopped" if stopped else "not running")


@db_app.command("status")
def db_status() -> None:
    """Say whether the embedded PostgreSQL runs."""
    from service.db.database import embedded_for

    emb = embedded_for(get_settings())
    typer.echo(f"{'running' if emb.is_running() else 'stopped'}: {emb.url} (data in {emb.pgdata})")


@topology_app.command("import")
def topology_import(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Topology YAML")],
    url: Annotated[str | None, typer.Option(help="API base URL; default: write to the database directly")] = None,
    token: Annotated[str | None, typer.Option(envvar="FABRICSCOPE_TOKEN", help="Bearer token (admin)")] = None,
) -> None:
    """Load a topology YAML (see README) and replace the declared topology with it."""
    from service.topology_file import load_topology

    try:
        topo = load_topology(file)
    except ConfigError as exc:
        _fail(str(exc))
    body = topo.model_dump(exclude_none=True)
    if url:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = httpx.put(f"{url.rstrip('/')}/v1/topology", json=body, headers=headers, timeout=30)
        if r.status_code >= 400:
            _fail(f"the API refused the topology ({r.status_code}): {r.text[:500]}")
        typer.echo(f"imported {len(topo.devices)} devices, {len(topo.links)} links via {url}")
        return
    import psycopg

    from service.db import inventory

    with database() as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        inventory.replace_topology(conn, devices=body["devices"], links=body["links"])
    typer.echo(f"imported {len(topo.devices)} devices, {len(topo.links)} links")


def _register_optional() -> None:
    """Commands that live with their collectors; missing ones simply are not offered."""
    optional = [
        ("agent", "collectors.host.agent", "agent_command"),
        ("collect", "collectors.switch.cli", "collect_command"),
        ("simulate", "service.simulate.cli", "simulate_command"),
        ("demo", "service.demo", "demo_command"),
        ("writer", "service.bus.cli", "writer_command"),
    ]
    for name, module, attr in optional:
        try:
            mod = __import__(module, fromlist=[attr])
            app.command(name)(getattr(mod, attr))
        except (ImportError, AttributeError) as exc:
            log.debug("command %s unavailable: %s", name, exc)
    try:
        from service.lab.cli import lab_app

        app.add_typer(lab_app, name="lab")
    except ImportError as exc:
        log.debug("lab commands unavailable: %s", exc)
    try:
        from collectors.training.importers.cli import import_app

        app.add_typer(import_app, name="import")
    except ImportError as exc:
        log.debug("import commands unavailable: %s", exc)


_register_optional()


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
