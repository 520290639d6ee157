"""The agent's per-collector poll results reach Prometheus (`--metrics-port`)."""

from __future__ import annotations

from pathlib import Path

import httpx

from fabricscope.collectors import selfmetrics
from tests.host.test_agent_live import _fixture_agent
from tests.support import free_port


def test_agent_polls_are_exported_on_the_metrics_port(tmp_path: Path) -> None:
    agent, sink = _fixture_agent("http://127.0.0.1:9", tmp_path, 1 << 20)
    port = free_port()
    server = selfmetrics.serve(port)
    try:
        agent.run_once()
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        sink.close(0.5)
        if server is not None:
            server[0].shutdown()
    up = [line for line in text.splitlines() if line.startswith('fabricscope_collector_up{device="outage:nic"}')]
    assert up and up[0].endswith(" 1.0")
    assert 'fabricscope_collector_polls_total{device="outage:nic",result="ok"}' in text


def test_collector_metrics_are_its_own_registry_only() -> None:
    """A collector's /metrics carries collector metrics, not the server's (ingest, HTTP, engine)."""
    port = free_port()
    server = selfmetrics.serve(port)
    try:
        selfmetrics.observe_poll("spineT", ok=True, seconds=0.5, samples=3)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        server[0].shutdown()
    assert 'fabricscope_collector_up{device="spineT"} 1.0' in text
    assert 'fabricscope_collector_samples_total{device="spineT"} 3.0' in text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert names and all(n.startswith("fabricscope_collector_") for n in names), names
    selfmetrics.forget_device("spineT")
    assert selfmetrics.REGISTRY.get_sample_value("fabricscope_collector_up", {"device": "spineT"}) is None


def test_a_sinks_backlog_is_read_at_scrape_time(tmp_path: Path) -> None:
    """The spool backlog of a real sender whose service is down shows on the collector's /metrics."""
    from fabricscope.collectors.sinks.factory import make_sink

    sink = make_sink("http://127.0.0.1:9", spool_path=tmp_path / "spool.jsonl", max_retries=0)
    selfmetrics.watch_sink("test-sink", lambda: sink.stats)
    port = free_port()
    server = selfmetrics.serve(port)
    try:
        sink.submit("samples", {"ts": 1.7e9, "source": "n1:eth0", "metric": "rx_bytes_total", "value": 1.0})
        sink.flush(10)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        sink.close(1)
        server[0].shutdown()
    spool = [line for line in text.splitlines()
             if line.startswith('fabricscope_collector_sink_spool_bytes{sink="test-sink"}')]
    assert spool and float(spool[0].split()[-1]) > 0
    assert 'fabricscope_collector_sink_items{outcome="spooled",sink="test-sink"} 1.0' in text
