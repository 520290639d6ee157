"""The database a server command runs against: embedded (started, then stopped) or DATABASE_URL.

Shared by ``serve``/``migrate``, the NATS writer and the demo, so each starts, migrates and stops
the database the same way and says so on stderr.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

import typer

from fabricscope.core.errors import ConfigError
from fabricscope.service.settings import get_settings


def fail(msg: str) -> NoReturn:
    """A one-line error for a command line (exit 2), never a traceback."""
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, like KeyboardInterrupt, so no ``except Exception`` swallows it."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM (systemctl stop, docker stop) into an exception that unwinds the stack, so every
    ``finally`` runs, the embedded database's stop among them; then end normally (exit status 0).

    Needed for uvicorn: it handles SIGTERM itself while serving, and once shut down raises the signal
    again for the handler it found, which by default ends the process on the spot.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; there is nothing to install elsewhere
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        typer.echo("stopped (SIGTERM)", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def database(*, migrate_schema: bool = True) -> Iterator[str]:
    """Yield the DSN in use; start (and afterwards stop) the embedded server when it is the default."""
    from fabricscope.service.db.database import database_url, embedded_for, migrate, redact

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
        fail(str(exc))
    finally:
        if started and emb is not None:
            emb.stop()
            typer.echo("database: embedded PostgreSQL stopped", err=True)
