"""``fabricscope writer``: drain the NATS ingest stream into the database (run N of them).

Registered by :mod:`fabricscope.cli` as the ``writer`` command; also runnable as
``python -m fabricscope.service.bus.cli`` (tests and benchmarks start it that way).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer


def writer_command(
    name: Annotated[str | None, typer.Option(help="Name in logs and NATS (default: writer-<host>-<pid>)")] = None,
    fetch: Annotated[int | None, typer.Option(help="Batches per fetch (FABRICSCOPE_WRITER_FETCH)")] = None,
    nats_url: Annotated[str | None, typer.Option(help="NATS server(s), comma-separated (FABRICSCOPE_NATS_URL)",
                                                 show_default=False)] = None,
) -> None:
    """Write batches from NATS JetStream to the database (idempotent; ack after commit)."""
    from pydantic import SecretStr

    from fabricscope.service.bus.writer import BusWriter
    from fabricscope.service.db.lifecycle import database
    from fabricscope.service.observability.logs import setup_logging
    from fabricscope.service.settings import get_settings

    settings = get_settings()
    updates: dict[str, object] = {}
    if fetch is not None:
        updates["writer_fetch"] = fetch
    if nats_url is not None:
        updates["nats_url"] = SecretStr(nats_url)
    if updates:
        settings = settings.model_copy(update=updates)
    setup_logging(settings.log_level, settings.log_json)
    # Writers never migrate (the API does, once); several of them start at the same time.
    with database(migrate_schema=False) as dsn:
        writer = BusWriter(settings, dsn, name=name)
        typer.echo(f"{writer!r} consuming {settings.nats_stream}/{settings.nats_consumer}", err=True)
        asyncio.run(_main(writer))


async def _main(writer: object) -> None:
    from fabricscope.service.bus.writer import BusWriter

    assert isinstance(writer, BusWriter)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)  # finish the batch in hand, then exit
    await writer.run(stop)


app = typer.Typer(add_completion=False)
app.command()(writer_command)

if __name__ == "__main__":  # pragma: no cover
    app()
