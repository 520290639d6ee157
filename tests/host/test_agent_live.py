"""The agent end to end: real veth/netns traffic, a real outage of the ingest endpoint, and the
real fabricscope service."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.host.agent import Agent, agent_command, sink_from_config
from fabricscope.collectors.host.config import parse_config
from tests.sinks.receiver import Receiver, free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYS_FIXTURE = FIXTURES / "sysfs_net/debian12-vm-lo-eth0/sys"


def _sh(*args: str, check: bool = True) -> str:
    return subprocess.run(args, check=check, capture_output=True, text=True).stdout


def _wait(pred: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def veth() -> Any:
    """Host end ``fsvA<pid>`` in this namespace, peer ``fsvB<pid>`` in netns ``fsns<pid>``; IPv6
    off and static neighbours so that no frame but the test's own crosses the link."""
    tag = os.getpid() % 100000
    ns, a, b = f"fsns{tag}", f"fsvA{tag}", f"fsvB{tag}"
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        _sh("ip", "link", "set", b, "netns", ns)
        Path(f"/proc/sys/net/ipv6/conf/{a}/disable_ipv6").write_text("1")
        _sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{b}.disable_ipv6=1")
        _sh("ip", "addr", "add", "10.231.7.1/24", "dev", a)
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", "10.231.7.2/24", "dev", b)
        mac_a = Path(f"/sys/class/net/{a}/address").read_text().strip()
        mac_b = _sh("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{b}/address").strip()
        _sh("ip", "neigh", "replace", "10.231.7.2", "lladdr", mac_b, "dev", a, "nud", "permanent")
        _sh("ip", "netns", "exec", ns, "ip", "neigh", "replace", "10.231.7.1", "lladdr", mac_a, "dev", b,
            "nud", "permanent")
        _sh("ip", "link", "set", a, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
        _wait(lambda: Path(f"/sys/class/net/{a}/operstate").read_text().strip() == "up")
        yield ns, a, b
    finally:
        _sh("ip", "link", "del", a, check=False)
        _sh("ip", "netns", "del", ns, check=False)


def _deltas(samples: list[dict[str, Any]], source: str) -> dict[str, float]:
    series: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s["source"] == source and "labels" not in s:
            series[s["metric"]].append(s["value"])
    return {m: v[-1] - v[0] for m, v in series.items() if len(v) > 1}


@pytest.mark.slow
@pytest.mark.root
def test_veth_traffic_deltas_and_link_flap(veth: tuple[str, str, str]) -> None:
    ns, a, b = veth
    binary = shutil.which("ethtool")
    assert binary, "ethtool is installed by .ci/run"
    recv = Receiver().start()
    cfg = parse_config({"host": "livehost", "sink": {"url": recv.url, "flush_interval_s": 0.1},
                        "nic": {"include": [a], "exclude": [], "ethtool": "subprocess",
                                "ethtool_binary": binary},
                        "rdma": {"enabled": False}, "storage": {"enabled": False}})
    sink = sink_from_config(cfg.sink)
    agent = Agent(cfg, sink)
    nic = agent.tasks[0][1]
    try:
        agent.run_collector(nic)
        n_in, size_in, n_out, size_out = 37, 1000, 23, 300
        # Host -> netns: a listener in the netns, so no ICMP "port unreachable" comes back.
        listener = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c",
             "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
             "s.bind(('10.231.7.2',9998));"
             "print('ready',flush=True); [s.recv(65535) for _ in range(int(sys.argv[1]))]", str(n_out)],
            stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            rx.bind(("10.231.7.1", 9999))
            rx.settimeout(10)
            for _ in range(n_out):
                tx.sendto(b"x" * size_out, ("10.231.7.2", 9998))
            listener.wait(10)
            _sh("ip", "netns", "exec", ns, sys.executable, "-c",
                "import socket; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                f"for _ in range({n_in}): s.sendto(b'y'*{size_in}, ('10.231.7.1', 9999))")
            for _ in range(n_in):
                rx.recv(65535)
        agent.run_collector(nic)

        # Link down (peer down -> no carrier on our end) and up again.
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "down")
        _wait(lambda: Path(f"/sys/class/net/{a}/carrier_down_count").read_text().strip() != "0")
        agent.run_collector(nic)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
        _wait(lambda: Path(f"/sys/class/net/{a}/operstate").read_text().strip() == "up")
        agent.run_collector(nic)
        assert sink.flush(15.0)
    finally:
        sink.close()
        recv.stop()

    samples = recv.items("samples")
    source = f"livehost:{a}"
    d = _deltas(samples, source)
    wire = 14 + 20 + 8  # Ethernet + IPv4 + UDP headers (veth counts no FCS)
    assert d["rx_packets_total"] == n_in and d["rx_bytes_total"] == n_in * (size_in + wire)
    assert d["tx_packets_total"] == n_out and d["tx_bytes_total"] == n_out * (size_out + wire)
    assert d["link_down_total"] == 1
    ups = [s["value"] for s in samples if s["source"] == source and s["metric"] == "oper_up"]
    assert ups == [1.0, 1.0, 0.0, 1.0]
    flaps = [e for e in recv.items("events") if e["kind"] == "link_flap"]
    assert len(flaps) == 1 and flaps[0]["source"] == source and flaps[0]["end"] > flaps[0]["start"]


def _fixture_agent(url: str, tmp_path: Path, spool_max: int) -> tuple[Agent, Any]:
    cfg = parse_config({"host": "outage", "sink": {"url": url, "spool_path": str(tmp_path / "spool"),
                                                  "spool_max_bytes": spool_max, "flush_interval_s": 0.05},
                        "nic": {"exclude": [], "ethtool": "none"}, "rdma": {"enabled": False},
                        "storage": {"enabled": False}, "paths": {"sys_root": str(SYS_FIXTURE)}})
    sink = sink_from_config(cfg.sink)
    return Agent(cfg, sink), sink


@pytest.mark.slow
@pytest.mark.parametrize("spool_max", [4 << 20, 24 << 10])
def test_outage_loses_nothing_that_fits_and_spool_stays_bounded(tmp_path: Path, spool_max: int) -> None:
    port = free_port()
    recv = Receiver(port=port)  # not started yet: the ingest API is down (connection refused)
    agent, sink = _fixture_agent(f"http://127.0.0.1:{port}", tmp_path, spool_max)
    nic = agent.tasks[0][1]
    try:
        spool = tmp_path / "spool"
        peak, polls = 0, 0
        # Poll until the sender has given up on the first batches (retries with backoff) and has
        # been spooling for a while, as during a real outage of some seconds.
        while polls < 60 or sink.stats["spooled"] < 200:
            agent.run_collector(nic)
            polls += 1
            time.sleep(0.03)
            peak = max(peak, sink.stats["spool_bytes"], spool.stat().st_size if spool.exists() else 0)
            assert polls < 2000, sink.stats
        assert peak <= spool_max
        recv.start()
        assert sink.flush(60.0)
        got = recv.items("samples")
        submitted, dropped = agent.stats["samples"], sink.stats["dropped"]
        assert len(got) + dropped == submitted
        if spool_max >= 1 << 20:
            assert dropped == 0 and len(got) == submitted  # no sample lost once the API is back
        else:
            assert dropped > 0  # the bound was hit: the oldest data was kept, the rest counted
        last: dict[tuple[str, str], float] = {}
        for s in got:  # replayed in order: per series, time never goes back
            key = (s["source"], s["metric"])
            assert s["ts"] >= last.get(key, 0.0)
            last[key] = s["ts"]
    finally:
        sink.close()
        recv.stop()


@pytest.mark.slow
def test_agent_once_into_the_real_service(service_url: str, db_conn: Any, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"host: agente2e\nsink: {{url: '{service_url}'}}\n"
                   f"nic: {{exclude: [], ethtool: none}}\nrdma: {{enabled: false}}\n"
                   f"storage: {{volumes: ['{tmp_path}'], disks_include: ['nonexistent*']}}\n"
                   f"paths: {{sys_root: '{SYS_FIXTURE}'}}\n")
    app = typer.Typer()
    app.command()(agent_command)
    result = CliRunner().invoke(app, ["--config", str(cfg), "--once"])
    assert result.exit_code == 0, result.output
    rows = db_conn.execute(
        "SELECT source, metric, value FROM sample_view WHERE source LIKE 'agente2e:%'").fetchall()
    got = {(r[0], r[1]): r[2] for r in rows}
    assert got[("agente2e:eth0", "rx_bytes_total")] == 294035580
    assert got[("agente2e:lo", "oper_up")] == 1
    assert got[(f"agente2e:{tmp_path}", "size_bytes")] > 0


def test_bad_config_exits_2_naming_the_field(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    cfg = tmp_path / "agent.yaml"
    cfg.write_text("sink: {url: 'http://127.0.0.1:1'}\nnic: {interval_s: -1}\n")
    app = typer.Typer()
    app.command()(agent_command)
    result = CliRunner().invoke(app, ["--config", str(cfg), "--once"])
    assert result.exit_code == 2 and "nic.interval_s" in result.output
