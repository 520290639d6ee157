"""What a RoCE or InfiniBand fabric reports beyond the base counters (#16): egress queues per traffic
class, per-priority pause and the PFC watchdog on RoCE switch ports; credit waits and link error
recoveries on InfiniBand ports and HCAs. And the signatures of the kinds that live in them
(`queue_incast`, `ib_congestion`, the link error recoveries of an InfiniBand link fault).

Tables are data derived from counters.py's NIC_METRICS/PORT_METRICS, so rows added there flow here.
Sizes, spreads and which victims show what are drawn per fault: the engine must not be able to win
by knowing the generator's constants.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fabricscope.service.simulate.faults import Fault
from fabricscope.service.simulate.topology import Cluster, ClusterSpec

Table = list[tuple[str, dict[str, str] | None, float | str, str]]
Bump = Callable[..., None]  # bump(source, metric, amount, frac, labels=None)

# Counters InfiniBand does not have (credit flow control, no pause or ECN, no Ethernet FCS).
NOT_ON_IB = frozenset({"rx_pause_frames_total", "tx_pause_frames_total", "ecn_marked_packets_total",
                       "cnp_sent_total", "cnp_handled_total", "rx_fcs_errors_total"})
# What an InfiniBand port or HCA adds (PortXmitWait, LinkErrorRecoveryCounter, PortRcvErrors).
IB_EXTRA: Table = [("port_xmit_wait_total", None, 2e4, "counter"),
                   ("link_error_recovery_total", None, 0.0, "counter"),
                   ("rx_errors_total", None, 0.002, "counter")]
TRAFFIC_PACKETS = "traffic_packets"  # base marker: the job's traffic in 4 KiB RoCE packets
PACKET_BYTES = 4096.0


def _relabel(table: Table, spec: ClusterSpec) -> Table:
    """The base tables say priority 3: the fabric's lossless priority instead."""
    pri = {"priority": str(spec.lossless_priority)}
    return [(m, pri if (lab or {}).get("priority") is not None else lab, b, k) for m, lab, b, k in table]


def nic_table(base: Table, spec: ClusterSpec) -> Table:
    if spec.fabric == "ib":
        have = {m for m, *_ in base}
        return [r for r in base if r[0] not in NOT_ON_IB] + [r for r in IB_EXTRA if r[0] not in have]
    return _relabel(base, spec)


def port_table(base: Table, spec: ClusterSpec) -> Table:
    if spec.fabric == "ib":
        have = {m for m, *_ in base}
        return [r for r in base if r[0] not in NOT_ON_IB] + [r for r in IB_EXTRA if r[0] not in have]
    out = _relabel(base, spec)
    for q, traffic, lossless in ((spec.lossless_priority, True, True), (spec.lossy_queue, False, False)):
        lab = {"queue": str(q)}
        out += [("tx_queue_bytes_total", lab, "traffic" if traffic else 2e6, "counter"),
                ("tx_queue_packets_total", lab, TRAFFIC_PACKETS if traffic else 2e6 / 1500, "counter"),
                ("queue_dropped_packets_total", lab, 0.0 if lossless else 0.05, "counter"),
                ("ecn_marked_packets_total", lab, 300.0 if lossless else 5.0, "counter"),
                ("queue_occupancy_bytes", lab, 4e4 if lossless else 1e4, "gauge"),
                ("queue_watermark_bytes", lab, 2e5 if lossless else 5e4, "gauge")]
        if lossless:
            out.append(("pfc_deadlock_total", lab, 0.0, "counter"))
    return out


def _leaf_of(port: str) -> str:
    return port.split(":", 1)[0]


def queue_incast(cluster: Cluster, f: Fault, sev: float, frac: np.ndarray, bump: Bump,
                 peer: dict[str, str], rng: np.random.Generator) -> None:
    """Many senders into one receiver: the leaf downlink's egress queue toward it fills. Lossless:
    ECN marks, and the leaf pauses the ports the traffic arrives on (its uplinks, some downlinks),
    so the spine ports and sender NICs *receive* pause, often more of it than the culprit shows of
    anything; paused spine ports' own queues then grow, and a storm may trip their PFC watchdog or
    spread one hop further. Lossy: the queue drops (tail/WRED) and may mark."""
    spec, port = cluster.spec, f.component
    lossless = f.variant == "lossless"
    q = {"queue": str(spec.lossless_priority if lossless else spec.lossy_queue)}
    pri = {"priority": str(spec.lossless_priority)}
    depth = sev * rng.uniform(0.5, 1.5) * float(rng.choice([8e6, 2e7, 6e7]))  # buffer sizes differ by ASIC
    bump(port, "queue_occupancy_bytes", depth, frac, q)
    bump(port, "queue_watermark_bytes", depth * rng.uniform(1.1, 2.0), frac, q)
    marks = sev * rng.uniform(0.3, 1.5) * 1e6 if (lossless or rng.random() < 0.5) else 0.0
    if marks:
        bump(port, "ecn_marked_packets_total", marks, frac, q)
        bump(port, "ecn_marked_packets_total", marks, frac)  # the port's total over its queues
        bump(peer[port], "ecn_marked_packets_total", marks * rng.uniform(0.5, 1.0), frac)  # the receiver sees CE
        bump(peer[port], "cnp_sent_total", marks * rng.uniform(0.05, 0.2), frac)
    if not lossless:
        drops = sev * rng.uniform(0.3, 2.0) * 5e3
        bump(port, "queue_dropped_packets_total", drops, frac, q)
        bump(port, "tx_discards_total", drops, frac)
        return
    leaf = _leaf_of(port)
    pause = sev * rng.uniform(0.5, 1.5) * 3e5
    ingress = [u for u in cluster.leaf_up if _leaf_of(u) == leaf]
    senders = [d for d in cluster.leaf_down if _leaf_of(d) == leaf and d != port]
    ingress += [d for d in senders if rng.random() < 0.5]
    for src in ingress:  # pause out of the ports the incast arrives on ...
        sent = pause * rng.uniform(0.3, 1.0)
        bump(src, "tx_pause_frames_total", sent, frac, pri)
        victim = peer[src]  # ... received, amplified by the storm, by whoever sends into them
        bump(victim, "rx_pause_frames_total", sent * rng.uniform(1.0, 3.0), frac, pri)
        if victim in cluster.spine_ports:
            bump(victim, "queue_occupancy_bytes", depth * rng.uniform(0.2, 1.2), frac, q)
            bump(victim, "queue_watermark_bytes", depth * rng.uniform(0.3, 1.5), frac, q)
            if rng.random() < 0.3:
                bump(victim, "pfc_deadlock_total", rng.uniform(0.5, 2.0), frac, q)
            if rng.random() < 0.4:  # the paused spine pauses the other leaves' uplinks in turn
                spine = _leaf_of(victim)
                for sp in cluster.spine_ports:
                    if _leaf_of(sp) == spine and sp != victim:
                        more = sent * rng.uniform(0.1, 0.5)
                        bump(sp, "tx_pause_frames_total", more, frac, pri)
                        bump(peer[sp], "rx_pause_frames_total", more * rng.uniform(1.0, 2.0), frac, pri)
    for nic in cluster.nics:  # senders slow down on CNPs: uniform, not a localizer
        bump(nic, "cnp_handled_total", sev * 800, frac)


def ib_congestion(cluster: Cluster, f: Fault, sev: float, frac: np.ndarray, bump: Bump,
                  peer: dict[str, str], rng: np.random.Generator) -> None:
    """Credit congestion on one switch port: it waits to transmit (PortXmitWait), and so, less, do
    the ports that feed its switch (upstream switch ports, sender HCAs); long waits time packets out
    (PortXmitDiscards)."""
    port = f.component
    wait = sev * rng.uniform(0.5, 1.5) * float(rng.choice([1e7, 3e7, 6e7]))
    bump(port, "port_xmit_wait_total", wait, frac)
    if rng.random() < 0.4:
        bump(port, "tx_discards_total", sev * rng.uniform(50, 500), frac)
    dev = _leaf_of(port)
    feeders = [p for p in cluster.switch_ports if p != port and _leaf_of(peer[p]) == dev and peer[p] != port]
    feeders += [n for n in cluster.nics if _leaf_of(peer[n]) == dev]
    for src in feeders:
        if rng.random() < 0.6:
            bump(src, "port_xmit_wait_total", wait * rng.uniform(0.05, 0.5), frac)


def ib_link_recovery(f: Fault, sev: float, frac: np.ndarray, bump: Bump, peer: dict[str, str],
                     rng: np.random.Generator) -> None:
    """An InfiniBand link with errors retrains: LinkErrorRecoveryCounter on one or both ends."""
    for end in (f.component, peer[f.component]):
        if end == f.component or rng.random() < 0.5:
            bump(end, "link_error_recovery_total", sev * rng.uniform(1.0, 6.0), frac)


def roce_queue_extras(cluster: Cluster, f: Fault, sev: float, frac: np.ndarray, bump: Bump,
                      peer: dict[str, str], rng: np.random.Generator) -> None:
    """Queue and watchdog signs of the base RoCE kinds: a congested port's lossless queue fills; a
    NIC storming pause stops its leaf port's queue (which fills, a victim) and may trip the watchdog."""
    spec = cluster.spec
    q = {"queue": str(spec.lossless_priority)}
    if f.kind == "fabric_congestion":
        depth = sev * rng.uniform(0.3, 1.5) * 2e7
        bump(f.component, "queue_occupancy_bytes", depth, frac, q)
        bump(f.component, "queue_watermark_bytes", depth * rng.uniform(1.1, 2.0), frac, q)
        other = peer[f.component]
        if f.variant.endswith("pfc") and other in cluster.switch_ports and rng.random() < 0.3:
            bump(other, "pfc_deadlock_total", rng.uniform(0.5, 2.0), frac, q)
    elif f.kind == "nic_degradation":
        port = peer[cluster.nics[f.target]]
        depth = sev * rng.uniform(0.3, 1.5) * 1e7
        bump(port, "queue_occupancy_bytes", depth, frac, q)
        bump(port, "queue_watermark_bytes", depth * rng.uniform(1.1, 2.0), frac, q)
        if rng.random() < 0.5:
            bump(port, "pfc_deadlock_total", rng.uniform(0.5, 2.0), frac, q)
