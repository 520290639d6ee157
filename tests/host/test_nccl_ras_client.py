"""The host agent's NCCL RAS query (collectors/host/nccl_ras_client.py) against a real TCP server on
127.0.0.1 that speaks RAS's protocol and replays recorded reports (tests/host/ras_server.py), and the
refused, timed-out and garbage answers; end to end, the agent loop posting to the real service and
its database, and the hang answer naming the rank RAS finds unresponsive."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from fabricscope.collectors import selfmetrics
from fabricscope.collectors.host.agent import Agent, sink_from_config
from fabricscope.collectors.host.config import NcclRasConfig, parse_config
from fabricscope.collectors.host.nccl_ras_client import NcclRasCollector, RasProtocolError, RasRefused, query
from fabricscope.core.errors import ConfigError
from fabricscope.core.model import Event
from tests.host.ras_server import RasServer, free_port


@pytest.fixture
def server_factory() -> Iterator[Any]:
    made: list[RasServer] = []

    def make(**kw: Any) -> RasServer:
        made.append(RasServer(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def problems(device: str) -> float:
    assert selfmetrics.REGISTRY is not None
    v = selfmetrics.REGISTRY.get_sample_value("fabricscope_collector_parse_problems_total",
                                              {"device": device, "format": "nccl-ras"})
    return v or 0.0


def collector(addr: str, host: str | None = None, **cfg: Any) -> tuple[NcclRasCollector, list[Event]]:
    got: list[Event] = []
    c = NcclRasCollector(host or f"n{uuid.uuid4().hex[:6]}", NcclRasConfig(enabled=True, addr=addr, **cfg), got.append)
    return c, got


def test_json_server_sends_the_handshake_timeout_and_format_and_the_report_is_read(server_factory: Any) -> None:
    srv = server_factory(json_case="docs-2.29-json-unresponsive", text_case="docs-2.24-running-ok")
    answer = query("127.0.0.1", srv.port, collect_timeout_s=7)
    assert srv.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 7", "SET FORMAT json", "STATUS"]
    assert (answer.format, answer.server_protocol) == ("json", "2")
    c, events = collector(srv.addr)
    assert c.poll() == []
    (e,) = events
    assert (e.kind, e.source.endswith(":nccl-ras"), e.job) == ("nccl_ras", True, None)
    assert [(r["rank"], r["state"], r["nranks"], r["pid"]) for r in e.attrs["ranks"]] == [(1, "unresponsive", 2,
                                                                                            1524345)]


def test_a_release_without_json_answers_error_and_the_text_report_is_read(server_factory: Any) -> None:
    srv = server_factory(text_case="issue1762-2.27-incomplete-nocomm", json=False)
    c, events = collector(srv.addr, job="train-7", verbose=True)
    c.poll()
    assert srv.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 5", "SET FORMAT json", "VERBOSE STATUS"]
    (e,) = events
    assert (e.job, e.attrs["format"], e.attrs["nccl_version"]) == ("train-7", "text", "2.27.3")
    assert [(r["rank"], r["state"], r["host"]) for r in e.attrs["ranks"]] == [(1, "unresponsive", "10.4.109.13")]
    # format: json insists: an NCCL without it is a protocol problem, not a silent fallback
    with pytest.raises(RasProtocolError, match="SET FORMAT json answered"):
        query("127.0.0.1", srv.port, fmt="json")
    text_only = server_factory(text_case="docs-2.24-running-ok")
    query("127.0.0.1", text_only.port, fmt="text")
    assert "SET FORMAT json" not in text_only.commands


def test_refused_is_quiet_no_problem_no_event(caplog: pytest.LogCaptureFixture) -> None:
    c, events = collector(f"127.0.0.1:{free_port()}")
    with pytest.raises(RasRefused):
        query(*c.addr)
    for _ in range(3):
        assert c.poll() == []
    assert events == [] and problems(c.device) == 0 and c.stats["refused"] == 3
    assert not [r for r in caplog.records if r.levelno >= 30]


def test_a_stalled_report_is_one_problem_per_poll_and_not_posted(server_factory: Any) -> None:
    srv = server_factory(text_case="docs-2.24-dead", stall=True)
    c, events = collector(srv.addr, timeout_s=0.5, collect_timeout_s=0)
    t0 = time.monotonic()
    c.poll()
    assert time.monotonic() - t0 < 2.0
    assert events == [] and problems(c.device) == 1 and c.stats["failed"] == 1


def test_garbage_answers_are_counted_once_per_poll(server_factory: Any) -> None:
    http = server_factory(hello=b"HTTP/1.1 400 Bad Request\r\n\r\n")
    c, events = collector(http.addr)
    c.poll()
    assert problems(c.device) == 1 and events == []
    with pytest.raises(RasProtocolError, match="not an NCCL RAS server"):
        query("127.0.0.1", http.port)
    # the protocol is right but the report is not one: every line not read is one problem in all
    odd = server_factory(text_case="docs-2.24-finalize-mismatch", json=False)
    c2, events2 = collector(odd.addr)
    c2.poll()
    assert problems(c2.device) == 1  # the docs' "[...]" elision
    # posted all the same (six ranks with a status unlike the others'), the parts not read counted in it
    assert [(e.attrs["problems"], len(e.attrs["ranks"])) for e in events2] == [(1, 6)]


def test_troubled_reports_post_every_poll_and_the_clearing_report_once(server_factory: Any) -> None:
    bad = server_factory(json_case="docs-2.29-json-unresponsive")
    c, events = collector(bad.addr)
    c.poll()
    c.poll()
    good = server_factory(text_case="issue1730-2.26-healthy-256gpu", json=False)
    c.addr = ("127.0.0.1", good.port)
    c.poll()
    c.poll()
    assert [len(e.attrs["ranks"]) for e in events] == [1, 1, 0]


@pytest.mark.parametrize("cfg, field", [
    ({"addr": "localhost"}, "nccl_ras.addr"),
    ({"addr": "127.0.0.1:70000"}, "nccl_ras.addr"),
    ({"timeout_s": 5, "collect_timeout_s": 5}, "nccl_ras"),
    ({"format": "xml"}, "nccl_ras.format"),
])
def test_config_errors_name_the_field(cfg: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_config({"sink": {"url": "http://x"}, "nccl_ras": cfg})
    assert parse_config({"sink": {"url": "http://x"}}).nccl_ras.enabled is False


def _hung_job(conn: psycopg.Connection, job: str, host: str) -> None:
    """Two ranks that announced the hook's notices and stopped sending steps 5 minutes ago."""
    conn.execute("INSERT INTO jobs (name) VALUES (%s)", (job,))
    last = time.time() - 300
    for r in range(2):
        conn.execute("INSERT INTO job_ranks (job, rank, host) VALUES (%s, %s, %s)", (job, r, host))
        conn.execute("INSERT INTO events (kind, source, job, start_ts, attrs) VALUES "
                     "('hang_watch', 'h', %s, to_timestamp(%s), %s)", (job, last - 60, Jsonb({"rank": r})))
        for i in range(5):
            end = last - (4 - i)
            conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s) VALUES "
                         "(%s, %s, %s, to_timestamp(%s), to_timestamp(%s), 1.0)", (job, r, i, end - 1, end))


def test_the_agent_posts_ras_reports_and_the_hang_answer_names_the_rank(
        tmp_path: Path, server_factory: Any, service_url: str, db_conn: psycopg.Connection, api: httpx.Client) -> None:
    """End to end: the real Agent loop querying the replaying RAS server, the real service and its
    database; the job's events carry no job, so the service matches them by the agent's host."""
    host, job = f"ras{uuid.uuid4().hex[:6]}", f"ras-hang-{uuid.uuid4().hex[:8]}"
    _hung_job(db_conn, job, host)
    before = api.get(f"/v1/jobs/{job}/hang").json()
    assert before["hung"] and before["suspects"] == []
    srv = server_factory(json_case="docs-2.29-json-unresponsive")
    off = {"enabled": False}
    cfg = parse_config({"host": host, "sink": {"url": service_url, "spool_path": str(tmp_path / "agent.spool"),
                                               "flush_interval_s": 0.1},
                        "nic": off, "rdma": off, "storage": off, "gpu": off, "tcp": off, "pressure": off,
                        "nccl_ras": {"enabled": True, "addr": srv.addr, "interval_s": 0.2}})
    sink = sink_from_config(cfg.sink)
    agent, stop = Agent(cfg, sink), threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 15
        while not (ans := api.get(f"/v1/jobs/{job}/hang").json())["suspects"] and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        loop.join(10)
        sink.flush(10)
        sink.close()
    assert ans["suspects"] == [{"rank": 1, "host": host, "group": None, "seq": None, "op": None,
                                "state": "ras_unresponsive", "source": "nccl_ras", "ras_state": "ras_unresponsive",
                                "ras_comm": "ae94423cfbb2ef4a", "ras_host": "172.16.64.245", "ras_pid": 1524345}]
    row = db_conn.execute("SELECT count(*) FROM events WHERE kind = 'nccl_ras' AND source = %s",
                          (f"{host}:nccl-ras",)).fetchone()
    assert row is not None and row[0] >= 1
