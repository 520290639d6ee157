"""``fabricscope collect``: poll the switches of an inventory (or one shard of it) into fabricscope.

The lead registers :func:`collect_command` on the main Typer app; it is a plain function so it can
also be called from tests.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import httpx
import typer

from fabricscope.collectors import selfmetrics
from fabricscope.collectors.sinks.factory import Sink, make_sink
from fabricscope.core.errors import CollectionError, ConfigError

from .inventory import load_inventory
from .lldp import Link, topology_body
from .scheduler import SwitchScheduler
from .sharding import parse_shard, select

log = logging.getLogger("fabricscope.switch")


class LinkPublisher:
    """POST /v1/topology/links with ``discovered: true`` (the server merges and marks them): LLDP
    neighbours and InfiniBand cables alike."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def __repr__(self) -> str:  # never the token
        return f"LinkPublisher({str(self._client.base_url)!r})"

    def __call__(self, links: list[Link]) -> None:
        try:
            r = self._client.post("/v1/topology/links", json=topology_body(links))
        except httpx.HTTPError as exc:
            raise CollectionError(f"POST /v1/topology/links: {type(exc).__name__}: {exc}") from exc
        if r.status_code >= 400:
            raise CollectionError(f"POST /v1/topology/links: HTTP {r.status_code}: {r.text[:200]}")

    def close(self) -> None:
        self._client.close()


def _sink(url: str | None, token: str | None, dsn: str | None) -> Sink:
    if url or dsn:
        return make_sink(url or dsn or "", token=token)
    raise ConfigError("give --url (the fabricscope API or nats://) or --dsn (write to the database directly)")


async def _run(scheduler: SwitchScheduler, once: bool) -> int:
    if once:
        results = await scheduler.run_once()
        for key, ok in sorted(results.items()):
            log.info("%s: %s", key, "ok" if ok else "FAILED")
        await scheduler.stop()
        return 0 if all(results.values()) else 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    scheduler.start()
    await stop.wait()
    await scheduler.stop()
    return 0


def collect_command(
    inventory: Path = typer.Option(..., "--inventory", "-i", help="Device inventory YAML."),
    shard: str = typer.Option("1/1", help="Poll only shard i of N (stable hash of device names)."),
    url: str | None = typer.Option(None, envvar="FABRICSCOPE_URL", help="fabricscope API base URL."),
    token: str | None = typer.Option(None, envvar="FABRICSCOPE_TOKEN", help="Bearer token (ingest, admin)."),
    dsn: str | None = typer.Option(None, envvar="DATABASE_URL", help="Write to PostgreSQL directly instead."),
    once: bool = typer.Option(False, help="Poll every device once and exit (status 1 if any failed)."),
    max_backoff: float = typer.Option(300.0, help="Cap of the per-device backoff, seconds."),
    log_level: str = typer.Option("INFO", help="Logging level."),
    metrics_port: int | None = typer.Option(None, help="Serve Prometheus self-metrics on 127.0.0.1:PORT."),
) -> None:
    """Poll switch port counters (SNMP, NETCONF, gNMI), LLDP neighbours and InfiniBand fabric sweeps."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    selfmetrics.serve(metrics_port)
    try:
        i, n = parse_shard(shard)
        devices = select(load_inventory(inventory).devices, i, n)
        sink = _sink(url, token, dsn)
        selfmetrics.watch_sink("collect", lambda: sink.stats)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    publisher = LinkPublisher(url, token) if url else None
    log.info("shard %d/%d: %d devices", i, n, len(devices))
    scheduler = SwitchScheduler(devices, sink, publisher, max_backoff=max_backoff)
    try:
        code = asyncio.run(_run(scheduler, once))
    finally:
        sink.flush()
        sink.close()
        if publisher:
            publisher.close()
    if code:
        raise typer.Exit(code)
