"""The TCP and pressure collectors on the real kernel: packet loss on a veth between two network
namespaces raises the retransmit share the collector reads from THAT namespace, and CPU hogs in a
cgroup v2 raise the cgroup's CPU pressure against an idle phase. Root only; short phases that hold on
a busy 2-core VM (the assertions compare phases, they do not time anything)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricscope.collectors.host.pressure import PressureCollector, cgroup2_root
from fabricscope.collectors.host.tcp import TcpCollector

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("nft") and shutil.which("ethtool")),
                                 reason="needs root, nft and ethtool")]

SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.231.8.2", 5001)); s.listen(4); print("ready", flush=True)
while True:
    c, _ = s.accept()
    while c.recv(1 << 16):
        pass
    c.close()
"""
# Sends N bytes per "go N" line on stdin, answers "done" when the peer has them all (close + EOF).
CLIENT = """
import socket, sys
print("ready", flush=True)
for line in sys.stdin:
    n = int(line.split()[1]); c = socket.create_connection(("10.231.8.2", 5001), timeout=30)
    buf = b"x" * 65536
    while n > 0:
        c.sendall(buf[:n]); n -= len(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1); c.close(); print("done", flush=True)
"""
LOSS = """
table inet fsloss {
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport 5001 numgen random mod 100 < 20 drop
  }
}
"""


def _sh(*args: str, stdin: str | None = None) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, input=stdin)


@pytest.fixture
def two_netns() -> Iterator[tuple[str, str]]:
    tag = os.getpid() % 100000
    a, b = f"fstcpA{tag}", f"fstcpB{tag}"
    _sh("ip", "netns", "add", a)
    _sh("ip", "netns", "add", b)
    try:
        _sh("ip", "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
        _sh("ip", "-n", a, "addr", "add", "10.231.8.1/24", "dev", "va")
        _sh("ip", "-n", b, "addr", "add", "10.231.8.2/24", "dev", "vb")
        for ns, dev in ((a, "va"), (b, "vb")):
            # One packet per MSS segment: with TSO/GSO a 64 KiB super-packet is one nft verdict, so
            # "5 % of packets" would be a couple of drops per run and the retransmit count a lottery.
            _sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        _sh("ip", "netns", "del", a)
        _sh("ip", "netns", "del", b)


def _popen(ns: str, code: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _counters(col: TcpCollector) -> dict[str, float]:
    return {s.metric: s.value for s in col.poll()}


def _phase(col: TcpCollector, client: subprocess.Popen[str], nbytes: int) -> tuple[float, float]:
    """(segments sent, segments retransmitted) in the client's namespace while sending ``nbytes``."""
    assert client.stdin is not None and client.stdout is not None
    before = _counters(col)
    client.stdin.write(f"go {nbytes}\n")
    client.stdin.flush()
    assert client.stdout.readline().strip() == "done"
    after = _counters(col)
    return (after["tcp_out_segments_total"] - before["tcp_out_segments_total"],
            after["tcp_retransmitted_segments_total"] - before["tcp_retransmitted_segments_total"])


def test_retransmits_rise_under_loss_in_that_namespace(two_netns: tuple[str, str]) -> None:
    a, b = two_netns
    server = _popen(b, SERVER)
    client = _popen(a, CLIENT)
    try:
        # /proc/<pid>/net is the network namespace of process <pid>: the client's, not this test's.
        col = TcpCollector("nsA", proc_root=Path(f"/proc/{client.pid}"))
        sent_clean, retrans_clean = _phase(col, client, 8 << 20)
        _sh("ip", "netns", "exec", b, "nft", "-f", "-", stdin=LOSS)  # drop 20 % of data arriving at the server
        sent_loss, retrans_loss = _phase(col, client, 2 << 20)
        ns_total = _counters(col)["tcp_out_segments_total"]
        host_total = _counters(TcpCollector("host"))["tcp_out_segments_total"]
    finally:
        for p in (client, server):
            p.kill()
            p.wait(10)
    seen = f"clean {retrans_clean:.0f}/{sent_clean:.0f}, loss {retrans_loss:.0f}/{sent_loss:.0f} retransmitted/sent"
    assert sent_clean > 0 and sent_loss > 0, seen
    # A clean veth can still retransmit a little on a starved VM (tail-loss probes, spurious RTOs: 140
    # of 5,857 segments once in CI, where 5 % loss then gave 70 of 1,476 and the comparison failed);
    # 20 % of data packets dropped retransmits ~28 % of segments (measured 414-417 of ~1,455, clean 0).
    assert retrans_loss >= 10, seen
    assert retrans_loss / sent_loss > max(0.01, 3 * retrans_clean / sent_clean), seen
    # The counters are the new namespace's own: all it ever sent is this test's stream (and its
    # handshake), while the host's count all the machine sent before. (Not "the host's moved less":
    # other work on the machine talks TCP over loopback, 932 segments during one loaded run.)
    assert ns_total <= sent_clean + sent_loss + 100, (ns_total, seen)
    assert host_total > ns_total + sent_clean, (host_total, ns_total)


@pytest.fixture
def cgroup() -> Iterator[tuple[Path, str]]:
    root = cgroup2_root(Path("/proc"), Path("/sys"))
    if not (root / "cgroup.procs").exists() or not (root / "cpu.pressure").exists():
        pytest.skip(f"no cgroup v2 with PSI at {root}")
    name = f"fabricscope-live-{os.getpid()}"
    (root / name).mkdir()
    try:
        yield root, name
    finally:
        for _ in range(50):  # the hogs are killed by the test; rmdir succeeds once they are reaped
            try:
                (root / name).rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _some(col: PressureCollector, name: str) -> float:
    return next(s.value for s in col.poll() if s.metric == "cpu_pressure_seconds_total" and s.labels
                and s.labels.get("cgroup") == name and s.labels["level"] == "some")


def test_cpu_hogs_raise_the_cgroup_cpu_pressure(cgroup: tuple[Path, str]) -> None:
    root, name = cgroup
    procs = str(root / name / "cgroup.procs")
    if (root / name / "cpu.max").exists():  # cpu controller delegated to v2: a quota makes it certain
        (root / name / "cpu.max").write_text("10000 100000\n")
    col = PressureCollector("n", cgroup_root=root, cgroups=("fabricscope-live-*",), thermal_root=None)
    t0, idle0 = time.monotonic(), _some(col, name)
    time.sleep(1.0)
    idle_rate = (_some(col, name) - idle0) / (time.monotonic() - t0)

    def join_cgroup() -> None:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))

    # More busy processes than CPUs (or than the quota): some always wait for a CPU.
    n = 2 * (os.cpu_count() or 2) + 1
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=join_cgroup) for _ in range(n)]
    try:
        time.sleep(0.3)
        t1, busy0 = time.monotonic(), _some(col, name)
        time.sleep(1.5)
        busy_rate = (_some(col, name) - busy0) / (time.monotonic() - t1)
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)
    assert idle_rate < 0.01, idle_rate  # no task in the cgroup: no stall at all
    assert busy_rate > 0.2, busy_rate  # seconds of stall per second
