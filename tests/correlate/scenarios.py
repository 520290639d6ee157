"""Sending a generated scenario to a running service, as the end-to-end suites do."""

from __future__ import annotations

from fabricscope.service.simulate.generator import Scenario
from fabricscope.service.simulate.send import HttpSink, send_scenario


def post(url: str, sc: Scenario) -> Scenario:
    """Send `sc` through the service's ingest API at `url` and return it."""
    sink = HttpSink(url)
    try:
        send_scenario(sink, sc)
    finally:
        sink.close()
    return sc
