"""``make_sink(url)``: the one place a configured URL becomes a sink.

``http(s)://`` posts to the ingest API, ``nats://`` (also ``tls://``, ``ws(s)://``, comma-separated
servers) publishes to JetStream, ``postgresql://`` writes straight to the database. Always the same
:class:`Sender` (queue, batching, spool, retries), only the transport differs. Standard library only
until a scheme needs more: nats-py and the server's code are imported just for their schemes.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.collectors.sinks.sender import Sender, Sink
from fabricscope.core.errors import ConfigError
from fabricscope.core.transport import Transport

NATS_SCHEMES = frozenset({"nats", "tls", "ws", "wss"})
DB_SCHEMES = frozenset({"postgresql", "postgres"})
HTTP_SCHEMES = frozenset({"http", "https"})
DB_TRANSPORT_MODULE = "fabricscope.service.ingest.db_transport"
_HINT = "pip install 'fabricscope[{extra}]'"


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def make_transport(url: str, *, token: str | None = None, timeout_s: float = 5.0) -> Transport:
    scheme = scheme_of(url)
    if scheme in HTTP_SCHEMES:
        return HttpTransport(url, token=token, timeout_s=timeout_s)
    if scheme in NATS_SCHEMES:
        try:
            from fabricscope.collectors.sinks.nats import NatsTransport  # only then is nats-py needed
        except ModuleNotFoundError as e:
            raise ConfigError(f"{scheme}:// needs {e.name}: {_HINT.format(extra='nats')}") from e
        return NatsTransport(url, timeout_s=timeout_s)  # credentials, if any, are in the URL
    if scheme in DB_SCHEMES:
        return _db_transport(url, timeout_s=timeout_s)
    raise ConfigError(f"sink URL must start with http(s)://, nats:// or postgresql://, not {scheme or 'nothing'}://")


def _db_transport(dsn: str, *, timeout_s: float) -> Transport:
    # The single place collectors reach into the service, and only at call time, by module name:
    # writing to the database is the server's code (validation, storage), installed with its extra.
    try:
        module = importlib.import_module(DB_TRANSPORT_MODULE)
    except ModuleNotFoundError as e:
        raise ConfigError(f"postgresql:// needs the server's code ({e.name} is missing): "
                          f"{_HINT.format(extra='server')}") from e
    transport: Transport = module.DbTransport(dsn, timeout_s=timeout_s)
    return transport


def make_sink(url: str, *, token: str | None = None, timeout_s: float = 5.0,
              spool_path: str | Path | None = None, **sender_options: Any) -> Sender:
    """A started :class:`Sender` for ``url``; ``sender_options`` are the Sender's (batch_max,
    flush_interval_s, queue_max, spool_max_bytes, max_retries). ConfigError for an unusable URL."""
    transport = make_transport(url, token=token, timeout_s=timeout_s)
    return Sender(transport, spool_path=spool_path, **sender_options)


__all__ = ["Sink", "make_sink", "make_transport", "scheme_of"]
