"""The database a server command runs against: embedded (started, then stopped) or DATABASE_URL.

Shared by ``serve``/``migrate``, the NATS writer and the demo, so each starts, migrates and stops
the database the same way and says so on stderr.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
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


def _hangup_is_terminate(signum: int, frame: FrameType | None) -> None:
    # SIGHUP (the terminal or ssh session closed) ends the process by default, before any clean-up,
    # leaving the embedded PostgreSQL running with parent 1 (issue #46 item 9). It is a request to
    # stop like SIGTERM: handed to whichever SIGTERM handler is in place (uvicorn's while serving).
    typer.echo("SIGHUP: stopping as on SIGTERM", err=True)
    signal.raise_signal(signal.SIGTERM)


@contextlib.contextmanager
def sigterm_unwinds(stop: threading.Event | None = None) -> Iterator[None]:
    """Turn SIGTERM (systemctl stop, docker stop) into an exception that unwinds the stack, so every
    ``finally`` runs, the embedded database's stop among them; then end normally (exit status 0).

    Needed for uvicorn: it handles SIGTERM itself while serving, and once shut down raises the signal
    again for the handler it found, which by default ends the process on the spot.
    `stop` is set as well: the flag outlives the exception, which Python prints and drops when it is
    raised while the main thread runs a finalizer (``__del__``), so a loop that waits on it still ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; there is nothing to install elsewhere
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        if stop is not None:
            stop.set()
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    previous_hup = signal.signal(signal.SIGHUP, _hangup_is_terminate)
    try:
        yield
    except Terminated:
        typer.echo("stopped (SIGTERM)", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, previous_hup)


@contextlib.contextmanager
def signals_deferred(what: str) -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while ``what`` runs, then deliver them to the handlers in place before.

    For the embedded server's start: killed half-way, initdb leaves its single-user backend running
    and a cluster that never starts, and pg_ctl a postmaster nobody owns. A start is bounded (pg_ctl's
    own 60 s wait), so the stop waits for it and then runs the usual clean-up.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if not held:
            typer.echo(f"stopping once {what} has finished", err=True)
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


@contextlib.contextmanager
def database(*, migrate_schema: bool = True) -> Iterator[str]:
    """Yield the DSN in use; start (and afterwards stop) the embedded server when it is the default."""
    from fabricscope.service.db import owner
    from fabricscope.service.db.database import database_url, embedded_for, migrate, redact

    settings = get_settings()
    started = False
    emb = None
    try:
        if settings.database_url is None:
            emb = embedded_for(settings)
            # Owned from before the start: a SIGTERM or Ctrl-C inside it (pg_ctl's wait, creating the
            # database) must still stop the server this call launched, not leave it running orphaned.
            started = not emb.is_running() or _adopt(emb.pgdata, settings.data_dir)
            with signals_deferred("the embedded database's start"):
                emb.start()
                if started:
                    owner.claim(settings.data_dir)
            typer.echo(f"database: embedded PostgreSQL at {emb.url} (data in {emb.pgdata})", err=True)
        url = database_url(settings)
        if migrate_schema:
            flavour = migrate(url, settings)
            typer.echo(f"database: {redact(url)} schema current ({flavour.name}: {flavour.describe()})", err=True)
        yield url
    except ConfigError as exc:
        fail(str(exc))
    finally:
        if started and emb is not None:
            if emb.stop():
                typer.echo("database: embedded PostgreSQL stopped", err=True)
            owner.release(settings.data_dir)


def _adopt(pgdata: Path, data_dir: Path) -> bool:
    """A server found running at start: adopt it (True: this process stops it) when the process
    that started it is gone, else leave it to that one."""
    from fabricscope.service.db import owner

    prev = owner.read(data_dir)
    if prev is not None and prev.alive():
        typer.echo(f"database: embedded PostgreSQL in {pgdata} is run by process {prev.pid}, which stops it",
                   err=True)
        return False
    who = "no recorded owner" if prev is None else f"its owner, process {prev.pid}, is gone"
    typer.echo(f"database: adopting a stale embedded PostgreSQL in {pgdata} ({who}); "
               "it stops with this service", err=True)
    return True
