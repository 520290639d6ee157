"""Faults the lab injects into the running job, each with its ground truth (layer, component).

Everything uses what this kernel offers (no netem, red or fq_codel): tbf shaping with a short
pfifo (real queueing and tail drops), nftables rules with counters (random drops, CE marking),
veth carrier down/up, cgroup v1 CPU quota and blkio write and read throttling. ``inject`` and ``clear``
are idempotent; ``clear`` restores exactly the state ``up`` made.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.lab import kernel, volumes
from tests.lab.kernel import sh
from tests.lab.spec import LabSpec


@dataclass(frozen=True)
class Fault:
    name: str
    what: str  # one line for the table
    layer: str  # ground truth, as the engine names layers
    component: Callable[[LabSpec], str]  # ground truth component
    inject: Callable[[LabSpec], None]
    clear: Callable[[LabSpec], None]
    duration_s: float = 12.0
    alt_layers: tuple[str, ...] = ()  # also correct (a CPU straggler may be called host)


def _port(spec: LabSpec, host: str) -> tuple[str, str, str]:
    comp = spec.port_of(host)
    dev, _, port = comp.partition(":")
    return comp, spec.ns(dev), port


def _nft(ns: str, *rule: str) -> None:
    sh("nft", *rule, ns=ns)


def _flush_rules(ns: str) -> None:
    sh("nft", "flush", "chain", "bridge", "lab", "ports", ns=ns, check=False)


def _tc_clear(ns: str, port: str) -> None:
    sh("tc", "qdisc", "del", "dev", port, "root", ns=ns, check=False, quiet=True)


def _shape(ns: str, port: str, *, rate: str, burst: str, latency: str, queue_packets: int) -> None:
    """An egress rate limit (tbf) feeding a pfifo of ``queue_packets``: real queueing, and tail
    drops once the queue is full."""
    _tc_clear(ns, port)
    sh("tc", "qdisc", "add", "dev", port, "root", "handle", "1:", "tbf", "rate", rate, "burst", burst,
       "latency", latency, ns=ns)
    sh("tc", "qdisc", "add", "dev", port, "parent", "1:1", "handle", "10:", "pfifo", "limit", str(queue_packets),
       ns=ns)


# -- congestion: a rate limit with a short queue on the leaf port towards host4 -----------------
def _congest(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host4")
    _shape(ns, port, rate="150mbit", burst="32kb", latency="20ms", queue_packets=16)


def _uncongest(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host4")
    _tc_clear(ns, port)


# -- ECN: the same port class of fault, but a deep queue that marks CE instead of dropping ---------
def _ecn(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host1")
    # 100 Mbit/s: steps clearly slower; at 150-300 Mbit/s some runs slowed 2x or not at all, which
    # the step-time noise of 2 shared cores can hide
    _shape(ns, port, rate="100mbit", burst="64kb", latency="200ms", queue_packets=4000)
    _nft(ns, "add", "rule", "bridge", "lab", "ports", "oifname", port, "ip", "ecn", "ect0", "counter", "name",
         f"ecn_{port}", "ip", "ecn", "set", "ce")


def _unecn(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host1")
    _flush_rules(ns)
    _tc_clear(ns, port)


# -- loss on host2's link: random drops of frames arriving at the leaf port (a bad cable) ----------
def _loss(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host2")
    _nft(ns, "add", "rule", "bridge", "lab", "ports", "iifname", port, "numgen", "random", "mod", "1000", "<", "120",
         "counter", "name", f"fcs_{port}", "drop")


def _unloss(spec: LabSpec) -> None:
    _, ns, _ = _port(spec, "host2")
    _flush_rules(ns)


# -- link flap on host3's link: carrier down for 2 s, then up ------------------------------------
def _flap(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host3")
    sh("ip", "-n", ns, "link", "set", port, "down")
    time.sleep(2.0)
    sh("ip", "-n", ns, "link", "set", port, "up")


def _unflap(spec: LabSpec) -> None:
    _, ns, port = _port(spec, "host3")
    sh("ip", "-n", ns, "link", "set", port, "up")


# -- CPU straggler: host3's rank limited to 15% of one CPU ----------------------------------------
def _cpu(spec: LabSpec) -> None:
    (kernel.cgroup(spec, "cpu", "host3") / "cpu.cfs_quota_us").write_text("5000")


def _uncpu(spec: LabSpec) -> None:
    (kernel.cgroup(spec, "cpu", "host3") / "cpu.cfs_quota_us").write_text("-1")


# -- slow checkpoint: host2's checkpoint volume throttled to 2 MB/s ------------------------------
def _slow_ckpt(spec: LabSpec) -> None:
    dev = volumes.loop_of(spec, "host2")
    (kernel.cgroup(spec, "blkio", "host2") / "blkio.throttle.write_bps_device").write_text(f"{dev} {2 << 20}")


def _unslow_ckpt(spec: LabSpec) -> None:
    try:
        dev = volumes.loop_of(spec, "host2")
    except kernel.LabError:
        return
    f = kernel.cgroup(spec, "blkio", "host2") / "blkio.throttle.write_bps_device"
    if f.exists():
        f.write_text(f"{dev} 0")  # 0 removes the rule


# -- slow dataset: the shared dataset volume's disk throttled to 512 KB/s of reads for every host --
# Each rank reads 512 KB per step from the volume (train.py), so every rank's data phase grows by
# about 1 s alike: 6x a step on a quiet machine, and still +130 % when the 2 shared cores are so
# busy that steps take 0.75 s and vary by 10 % (MAD). The slow bar is 6 sigmas of that noise: at
# 2 MB/s (+0.25 s) and 1 MB/s (+0.5 s, +70 %) such busy runs flagged none of the fault's steps.
# The throttle sits on the disk under the volume, not on the volume's own device: there it would
# hold the bios before the volume's requests exist, and the volume's diskstats would not see the
# wait (volumes.py says what was measured).
DATASET_READ_BPS = 512 << 10


def _dataset_throttle(spec: LabSpec, bps: int) -> None:
    dev = volumes.dataset_disk(spec)
    for h in spec.hosts:
        (kernel.cgroup(spec, "blkio", h) / "blkio.throttle.read_bps_device").write_text(f"{dev} {bps}")


def _slow_dataset(spec: LabSpec) -> None:
    _dataset_throttle(spec, DATASET_READ_BPS)


def _unslow_dataset(spec: LabSpec) -> None:
    with contextlib.suppress(kernel.LabError, FileNotFoundError):
        _dataset_throttle(spec, 0)  # 0 removes the rule


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("congestion", "tbf 150 Mbit/s + pfifo 16 pkts on leaf2:swp2 (to host4)", "fabric",
          lambda s: s.port_of("host4"), _congest, _uncongest),
    Fault("packet_loss", "nft numgen 12% drop of frames entering leaf1:swp2 (host2's link)", "link",
          lambda s: s.port_of("host2"), _loss, _unloss),
    Fault("ecn", "tbf 100 Mbit/s deep queue + nft 'ip ecn set ce' on leaf1:swp1 (to host1)", "fabric",
          lambda s: s.port_of("host1"), _ecn, _unecn),
    Fault("link_flap", "leaf2:swp1 (host3's link) carrier down 2 s, up", "link",
          lambda s: s.port_of("host3"), _flap, _unflap, duration_s=2.0),
    Fault("cpu_straggler", "host3's rank: cpu.cfs_quota_us 5% of a CPU", "compute",
          lambda s: "host3", _cpu, _uncpu, duration_s=8.0, alt_layers=("host",)),
    Fault("slow_checkpoint", "host2's checkpoint volume (ext4 on loop): blkio write 2 MB/s", "storage",
          lambda s: f"host2:{volumes.volume_dir(s, 'host2')}", _slow_ckpt, _unslow_ckpt),
    Fault("slow_dataset", "shared dataset volume (ext4 on loop on a loop 'disk'): blkio read 512 KB/s on its disk, "
          "every host", "storage", lambda s: s.dataset_source, _slow_dataset, _unslow_dataset),
)}


def clear_all(spec: LabSpec) -> None:
    for f in FAULTS.values():
        with contextlib.suppress(kernel.LabError, OSError, subprocess.SubprocessError):
            f.clear(spec)
