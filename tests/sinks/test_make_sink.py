"""make_sink: the URL's scheme picks the transport; an unusable URL or a missing extra is a
ConfigError saying what to do; collectors never import the service at import time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fabricscope.collectors.sinks import factory
from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.collectors.sinks.nats import NatsTransport
from fabricscope.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("url", "cls_name"), [
    ("http://127.0.0.1:1", HttpTransport.__name__),
    ("HTTPS://example.invalid", HttpTransport.__name__),
    ("nats://127.0.0.1:1", NatsTransport.__name__),
    ("tls://127.0.0.1:1", NatsTransport.__name__),
    ("postgresql://u:pw@127.0.0.1:1/db", "DbTransport"),
    ("postgres://u:pw@127.0.0.1:1/db", "DbTransport"),
])
def test_scheme_picks_the_transport(url: str, cls_name: str) -> None:
    s = factory.make_sink(url, flush_interval_s=60)
    try:
        assert type(s.transport).__name__ == cls_name
        assert "pw" not in repr(s)
    finally:
        s.close(0.5)


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:8000", ""])
def test_unknown_scheme_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="http"):
        factory.make_sink(url)


def test_database_without_the_server_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # What an install without [server] looks like to the import system: psycopg cannot be imported.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, factory.DB_TRANSPORT_MODULE, raising=False)
    with pytest.raises(ConfigError, match=r"pip install 'fabricscope\[server\]'") as err:
        factory.make_sink("postgresql://u:pw@127.0.0.1:1/db")
    assert isinstance(err.value.__cause__, ModuleNotFoundError) and "pw" not in str(err.value)
