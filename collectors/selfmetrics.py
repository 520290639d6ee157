"""Prometheus self-metrics of collector processes (`--metrics-port`): poll results per device.

A collector process exports these and nothing else: they live in their own registry, not in
prometheus_client's global one that the server fills. prometheus_client comes with the
``[agent]``/``[switch]`` extras; without it polls are simply not exported.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

log = logging.getLogger(__name__)

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge
except ModuleNotFoundError:  # pragma: no cover - a bare install without the agent extra
    REGISTRY = None
else:
    REGISTRY = CollectorRegistry(auto_describe=True)
    COLLECTOR_UP = Gauge("fabricscope_collector_up", "Last poll of a device succeeded (1) or not (0)", ["device"],
                         registry=REGISTRY)
    COLLECTOR_SECONDS = Gauge("fabricscope_collector_poll_seconds", "Duration of the last poll", ["device"],
                              registry=REGISTRY)
    COLLECTOR_POLLS = Counter("fabricscope_collector_polls_total", "Device polls", ["device", "result"],
                              registry=REGISTRY)
    COLLECTOR_SAMPLES = Counter("fabricscope_collector_samples_total", "Samples produced by polls", ["device"],
                                registry=REGISTRY)
    PARSE_PROBLEMS = Counter("fabricscope_collector_parse_problems_total", "Parser problems: rows, keys or "
                             "leaves dropped, cells not placed, guesses made (host formats; switch protocols as "
                             "the format)", ["device", "format"],
                             registry=REGISTRY)
    COLLECTOR_PROBLEMS = Counter("fabricscope_collector_problems_total", "Deprecated, the same count as "
                                 "fabricscope_collector_parse_problems_total{format=protocol}: parts of a switch's "
                                 "replies skipped", ["device", "protocol"],
                                 registry=REGISTRY)
    SINK_SPOOL_BYTES = Gauge("fabricscope_collector_sink_spool_bytes",
                             "Bytes waiting in the process's outage spool (read at scrape time)", ["sink"],
                             registry=REGISTRY)
    SINK_EVENTS = Gauge("fabricscope_collector_sink_items", "Items the sink sent, spooled, rejected or dropped "
                        "(read at scrape time)", ["sink", "outcome"], registry=REGISTRY)


def observe_poll(device: str, *, ok: bool, seconds: float, samples: int = 0) -> None:
    """One finished poll of `device` (switch collector or host agent)."""
    if REGISTRY is None:
        return
    COLLECTOR_UP.labels(device).set(1 if ok else 0)
    COLLECTOR_SECONDS.labels(device).set(seconds)
    COLLECTOR_POLLS.labels(device, "ok" if ok else "error").inc()
    if samples:
        COLLECTOR_SAMPLES.labels(device).inc(samples)


# (device, format, problem with its numbers blanked) already logged: each is logged once, counted every time.
# Bounded: a parser whose problem text carries changing values would otherwise grow it forever.
_LOGGED: set[tuple[str, str, str]] = set()
_LOGGED_MAX = 10_000
_DIGITS = re.compile(r"\d+")


def report_problems(device: str, fmt: str, problems: list[str], logger: logging.Logger | None = None, *,
                    protocol: str | None = None) -> None:
    """What a parser dropped, could not place or guessed while reading ``device``'s ``fmt`` output (a
    host format, or a switch collector's protocol): each distinct problem logged once (warning, the device
    named; problems that differ only in their numbers are one problem), all counted in
    ``fabricscope_collector_parse_problems_total{device, format}``. The switch collectors pass ``protocol``
    too, so that the older ``fabricscope_collector_problems_total{device, protocol}`` (one idea, two names
    until #43: kept for the dashboards and alerts that read it) goes on counting the same problems."""
    if not problems:
        return
    for problem in problems:
        key = (device, fmt, _DIGITS.sub("#", problem))
        if key not in _LOGGED:
            if len(_LOGGED) >= _LOGGED_MAX:
                _LOGGED.clear()
            _LOGGED.add(key)
            (logger or log).warning("%s: %s: %s", device, fmt, problem)
    if REGISTRY is not None:
        PARSE_PROBLEMS.labels(device, fmt).inc(len(problems))
        if protocol is not None:
            COLLECTOR_PROBLEMS.labels(device, protocol).inc(len(problems))


def observe_problems(device: str, protocol: str, count: int) -> None:
    """Deprecated (use :func:`report_problems` with ``protocol``): counts ``count`` problems of ``device``
    over ``protocol`` in ``fabricscope_collector_problems_total`` only, logging nothing."""
    if REGISTRY is None or count <= 0:
        return
    COLLECTOR_PROBLEMS.labels(device, protocol).inc(count)


def forget_device(device: str) -> None:
    """A device left the inventory: drop its series rather than report it down forever."""
    if REGISTRY is None:
        return
    for g in (COLLECTOR_UP, COLLECTOR_SECONDS):
        with suppress(KeyError):
            g.remove(device)


def watch_sink(name: str, stats: Callable[[], Mapping[str, int]]) -> None:
    """Export a sink's spool backlog and item outcomes, read from ``stats()`` when scraped."""
    if REGISTRY is None:
        return
    def reader(key: str) -> Callable[[], float]:
        return lambda: float(stats().get(key, 0))

    SINK_SPOOL_BYTES.labels(name).set_function(reader("spool_bytes"))
    for outcome in ("sent", "spooled", "rejected", "dropped"):
        SINK_EVENTS.labels(name, outcome).set_function(reader(outcome))


def serve(port: int | None, addr: str = "127.0.0.1") -> Any:
    """Start /metrics on ``addr:port`` when a port is given; returns (server, thread) or None."""
    if not port:
        return None
    if REGISTRY is None:
        log.warning("--metrics-port %d ignored: prometheus-client is not installed "
                    "(pip install 'fabricscope[agent]')", port)
        return None
    from prometheus_client import start_http_server

    server = start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("self-metrics on http://%s:%d/metrics", addr, port)
    return server
