"""Prometheus self-metrics of collector processes (`--metrics-port`): poll results per device.

The metric objects live with the service's (one registry, one naming scheme); collectors reach them
through here so a collector without prometheus_client installed still runs.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def observe_poll(device: str, *, ok: bool, seconds: float, samples: int = 0) -> None:
    try:
        from fabricscope.service.observability.metrics import observe_poll as _observe
    except ImportError:  # pragma: no cover - prometheus_client absent
        return
    _observe(device, ok=ok, seconds=seconds, samples=samples)


def serve(port: int | None, addr: str = "127.0.0.1") -> Any:
    """Start /metrics on ``addr:port`` when a port is given; returns the server or None."""
    if not port:
        return None
    from fabricscope.service.observability.metrics import serve_metrics

    server = serve_metrics(port, addr)
    log.info("self-metrics on http://%s:%d/metrics", addr, port)
    return server
