"""Localization on the topology of a job's ranks: which NIC, link, switch port or volume is anomalous
in the step's window, against its peers and its own history.

Signals are data: (role of the source, metric) -> (layer, which component it points at, weight).
Origin signals (a NIC dropping for lack of buffer, a switch port marking ECN or sending pause, a
port counting FCS errors) weigh 1; symptoms (pause *received*, CNPs, retransmits) weigh less and
point at the component that caused them (the link peer that sent the pause).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from fabricscope.service.correlate.constants import (
    AFTERMATH_S,
    AFTERMATH_WEIGHT,
    MIN_SCORE,
    NO_HISTORY_DISCOUNT,
    SOLO_FLOOR_SHARE,
    SOLO_REL_FLOOR,
)

SWITCH_ROLES = ("leaf_down", "leaf_up", "spine")
# (role class, metric) -> (layer, target, weight). target: self | peer | link. Layer "@peer" = the
# layer of whoever sits on the other end (a NIC -> nic, a switch port -> fabric).
SIGNALS: dict[tuple[str, str], tuple[str, str, float]] = {
    ("nic", "rx_out_of_buffer_total"): ("nic", "self", 1.0),
    ("nic", "tx_pause_frames_total"): ("nic", "self", 1.0),
    ("nic", "rx_discards_total"): ("nic", "self", 0.8),
    ("nic", "rdma_retransmits_total"): ("nic", "self", 0.4),
    ("nic", "rdma_timeouts_total"): ("nic", "self", 0.4),
    ("nic", "rx_pause_frames_total"): ("fabric", "peer", 0.4),
    ("nic", "ecn_marked_packets_total"): ("fabric", "peer", 0.3),
    ("nic", "cnp_handled_total"): ("fabric", "peer", 0.2),
    ("nic", "rx_fcs_errors_total"): ("link", "link", 1.0),
    ("nic", "symbol_errors_total"): ("link", "link", 1.0),
    ("nic", "rx_errors_total"): ("link", "link", 0.6),
    ("nic", "link_down_total"): ("link", "link", 1.0),
    ("switch", "tx_pause_frames_total"): ("fabric", "self", 1.0),
    ("switch", "ecn_marked_packets_total"): ("fabric", "self", 1.0),
    ("switch", "tx_discards_total"): ("fabric", "self", 0.9),
    ("switch", "rx_discards_total"): ("fabric", "self", 0.7),
    ("switch", "queue_occupancy_bytes"): ("fabric", "self", 0.8),
    ("switch", "port_xmit_wait_total"): ("fabric", "self", 0.8),
    ("switch", "rx_pause_frames_total"): ("@peer", "peer", 0.4),
    ("switch", "rx_fcs_errors_total"): ("link", "link", 1.0),
    ("switch", "symbol_errors_total"): ("link", "link", 1.0),
    ("switch", "rx_errors_total"): ("link", "link", 0.6),
    ("switch", "link_down_total"): ("link", "link", 1.0),
    ("volume", "read_latency_seconds"): ("storage", "self", 1.0),
    ("volume", "write_latency_seconds"): ("storage", "self", 1.0),
    # -- egress queues, PFC watchdog, InfiniBand (direction.py moves pause and credit-wait rows
    # of victims onto the congested port). Queue series carry `queue`, so each queue is its own peer group.
    ("switch", "queue_dropped_packets_total"): ("fabric", "self", 0.9),
    ("switch", "queue_watermark_bytes"): ("fabric", "self", 0.8),
    ("switch", "pfc_deadlock_total"): ("@peer", "peer", 0.6),  # the watchdog fires on the paused side
    ("switch", "link_error_recovery_total"): ("link", "link", 1.0),
    ("nic", "link_error_recovery_total"): ("link", "link", 1.0),
    ("nic", "port_xmit_wait_total"): ("fabric", "peer", 0.3),
    # -- hosts: a socket transport (gloo, NCCL over sockets) moves no RDMA counter; the host's
    # TCP retransmissions and timeouts are then the network's only trace. They point at the host's
    # NIC (target host_nic: the NIC the job's ranks on that host use, or the host when that is not
    # one known NIC): loss on the host's path first shows where the host meets the network.
    ("host", "tcp_retransmitted_segments_total"): ("nic", "host_nic", 0.8),
    ("host", "tcp_timeouts_total"): ("nic", "host_nic", 0.6),
}
# Smallest excess that can matter, per metric (per second for counters, the unit for gauges):
# keeps a quiet counter (0 errors, MAD 0) from turning one stray increment into a huge score.
FLOORS: dict[str, float] = {
    "rx_out_of_buffer_total": 50,
    "tx_pause_frames_total": 200,
    "rx_pause_frames_total": 200,
    "ecn_marked_packets_total": 200,
    "cnp_handled_total": 500,
    "cnp_sent_total": 500,
    "rx_discards_total": 20,
    "tx_discards_total": 20,
    "rx_fcs_errors_total": 5,
    "symbol_errors_total": 20,
    "rx_errors_total": 5,
    "link_down_total": 0.02,
    "rdma_retransmits_total": 50,
    "rdma_timeouts_total": 5,
    "queue_occupancy_bytes": 1e6,
    "port_xmit_wait_total": 1e5,
    "read_latency_seconds": 0.002,
    "write_latency_seconds": 0.002,
    # egress queues, PFC watchdog, InfiniBand: a few drops, a MB of buffer, one storm or recovery
    "queue_dropped_packets_total": 20,
    "queue_watermark_bytes": 1e6,
    "pfc_deadlock_total": 0.02,
    "link_error_recovery_total": 0.02,
    # hosts: a few retransmits per second are background (control traffic, one lost segment);
    # a retransmission timeout is rare on a healthy host, one every two seconds is not background.
    "tcp_retransmitted_segments_total": 50,
    "tcp_timeouts_total": 0.5,
}
# Metrics whose smallest excess that matters is a share of their level (window.level_floor): a
# volume's read latency. 2 ms is noise on a disk array and five times a local NVMe volume's whole read
# latency; against its peers the floor is this share of their median when that is less. 0.15, as a
# shared volume's own-history floor (SOLO_REL_FLOOR): a gauge's usual ~10 % wobble scores under 3.
# Not write latency: a checkpoint's writes run 2-4 ms on the hosts still writing while the others'
# are back at 0.5 ms, every checkpoint (a shared volume's slow steps would be named after a
# host still writing, and fault-free runs would have false slow steps).
LEVEL_FLOORS: dict[str, float] = {"read_latency_seconds": SOLO_REL_FLOOR}
# Signals only a step's own checkpoint write can feel: a step that writes none (its hook reported no
# checkpoint phase) is not explained by them. A checkpoint volume's slow writes outlast its write by
# the latency sample's span (5-10 s), and read as the cause of the plain steps after it (false slow steps
# after a slow checkpoint write).
WRITE_SIGNALS = frozenset({"write_latency_seconds"})
# Gauges that report the peak since their last read (OpenConfig max-queue-len, SONiC's periodic
# watermark, jnxCosQstatDepthPeak): like a counter's rate, a 10-s reading holds seconds outside the
# step, so it is not a state the step ran in (causes.has_state_row): a one-step incast's watermark,
# read after it, shows in the steps before it and would fill them in as the fault's.
PEAK_GAUGES = frozenset({"queue_watermark_bytes"})


@dataclass
class Topo:
    role: dict[str, str]  # source -> nic | leaf_down | leaf_up | spine | volume
    peer: dict[str, str]  # source -> the other end of its link
    host_of: dict[str, str]  # NIC/volume source -> host
    # Volumes the job's checkpoints were written to (the hook's `checkpoint` events name the mount):
    # which volume is "the checkpoint volume" is learnt from what the job did, never from its name.
    checkpoint_volumes: frozenset[str] = frozenset()
    # host -> the NIC its ranks use (the host itself when several or none are known)
    host_nic: dict[str, str] = field(default_factory=dict)

    def link_name(self, source: str) -> str:
        """A link is named by its lower-tier switch port (leaf side)."""
        role = self.role.get(source)
        if role in ("nic", "spine"):
            return self.peer.get(source, source)
        return source

    @property
    def sources(self) -> list[str]:
        return list(self.role)

    @cached_property
    def shared_volumes(self) -> tuple[str, ...]:
        """Volumes not on a job host: a storage system's, which every host may read. Once per
        topology: the engine asks on every slow step, and a 4,096-rank job has ~20,000 roles."""
        hosts = {s for s, r in self.role.items() if r == "host"}
        return tuple(sorted(v for v, r in self.role.items() if r == "volume" and self.host_of.get(v) not in hosts))


def build_topo(
    ranks: pd.DataFrame, links: pd.DataFrame, volumes: list[str], checkpoint_sources: frozenset[str] = frozenset()
) -> Topo:
    """`ranks`: host, nic; `links`: a, b. Candidates: the job's NICs, the ports they plug into,
    those leaves' uplinks and the spine ports at their other end, and the job hosts' volumes.
    `checkpoint_sources`: sources of the job's `checkpoint` events (`host:/mount`)."""
    nics = {f"{h}:{n}" for h, n in zip(ranks["host"], ranks["nic"], strict=False) if isinstance(n, str) and n}
    peer: dict[str, str] = {}
    for a, b in zip(links["a"], links["b"], strict=False):
        peer[a], peer[b] = b, a
    role: dict[str, str] = {n: "nic" for n in nics}
    leaves = set()
    for n in nics:
        p = peer.get(n)
        if p:
            role[p] = "leaf_down"
            leaves.add(p.split(":", 1)[0])
    for a, b in zip(links["a"], links["b"], strict=False):
        for x, y in ((a, b), (b, a)):
            if x.split(":", 1)[0] in leaves and x not in role and y not in nics:
                role[x] = "leaf_up"
                role[y] = "spine"
    host_of = {n: n.split(":", 1)[0] for n in nics}
    job_hosts = {h for h in ranks["host"] if isinstance(h, str)}
    # A volume the job checkpoints to is one even when no collector reports it: the hook's events say
    # where the writes went, and a slow write is then pinned on it from the timings alone.
    for v in [*volumes, *(c for c in checkpoint_sources if c.split(":", 1)[0] in job_hosts)]:
        role[v] = "volume"
        host_of[v] = v.split(":", 1)[0]
    host_nic = add_rank_roles(ranks, role, host_of)
    return Topo(role, peer, host_of, frozenset(v for v in checkpoint_sources if role.get(v) == "volume"), host_nic)


def add_rank_roles(ranks: pd.DataFrame, role: dict[str, str], host_of: dict[str, str]) -> dict[str, str]:
    """GPU (`host:gpuN`) and host sources of the job, with roles from the rank placement (never from
    name patterns), and which NIC each host's ranks use. Returns host -> NIC source or host."""
    used: dict[str, set[str]] = {}
    gpus = ranks["gpu"] if "gpu" in ranks else [None] * len(ranks)
    for h, g, n in zip(ranks["host"], gpus, ranks["nic"], strict=False):
        if not isinstance(h, str) or not h:
            continue
        role.setdefault(h, "host")
        host_of.setdefault(h, h)
        if isinstance(g, str) and g:
            role.setdefault(f"{h}:{g}", "gpu")
            host_of.setdefault(f"{h}:{g}", h)
        used.setdefault(h, set()).add(f"{h}:{n}" if isinstance(n, str) and n else h)
    return {h: next(iter(s)) if len(s) == 1 and s != {h} else h for h, s in used.items()}


def series_groups(meta: pd.DataFrame, topo: Topo) -> pd.DataFrame:
    """Peer groups for the database-side scoring: same role, metric and labels (volumes: same mount).
    `meta`: series_id, source, metric, kind, labels. Adds role, grp (int), gauge, floor, net, lookback."""
    df = meta[meta["metric"].isin(FLOORS.keys())].copy()
    df["role"] = df["source"].map(topo.role)
    # Only series that can become evidence: a (role, metric) with no SIGNALS row (a NIC's CNPs sent)
    # is dropped by candidates() whatever its score, and each series scored costs every step.
    cls = df["role"].where(~df["role"].isin(SWITCH_ROLES), "switch")
    can = np.array([(c, m) in SIGNALS for c, m in zip(cls, df["metric"], strict=True)], dtype=bool)
    df = df[can].reset_index(drop=True)  # a boolean array, also when empty (an empty list selects columns)
    # astype(str): an empty frame has float columns, which cannot be concatenated with strings.
    key = df["role"].astype(str) + "|" + df["metric"].astype(str) + "|" + df["labels"].astype(str)
    vol = df["role"] == "volume"
    key[vol] = key[vol] + "|" + df.loc[vol, "source"].str.split(":", n=1).str[1]
    # a volume of a storage system (not on a job host) is shared by all hosts: it has no peers,
    # whatever its name, even if another storage system serves a volume of the same name.
    shared = vol & df["source"].isin(topo.shared_volumes)
    key[shared] = key[shared] + "|" + df.loc[shared, "source"]
    df["grp"] = pd.factorize(key)[0].astype(int)
    df["solo"] = df.groupby("grp")["series_id"].transform("size").eq(1) if len(df) else False
    df["gauge"] = df["kind"] == "gauge"
    df["floor"] = df["metric"].map(FLOORS).astype(float)
    df["floor_rel"] = df["metric"].map(LEVEL_FLOORS).fillna(0.0).astype(float)
    df["net"] = ~vol
    df["lookback"] = df["metric"].map(AFTERMATH_S).fillna(0.0).astype(float)
    return df


def finish_scores(out: pd.DataFrame, meta: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    """`out`: peer outliers (series_id, cur, peer_med, peer_z); `hist`: series_id, hist_med, hist_sigma.
    An anomaly must stand out from its peers *and* from its own past; without history the peer
    score counts, discounted."""
    # The outliers' rows of meta first: meta holds every series of the job (115,000 at 4,096 ranks),
    # and copying its columns for the merge cost more than the scoring, every step.
    mine = meta.loc[
        meta["series_id"].isin(out["series_id"]), ["series_id", "source", "metric", "labels", "role", "floor"]
    ]
    df = out.merge(mine, on="series_id")
    df = df.merge(hist, on="series_id", how="left")
    # The same arithmetic on the columns' arrays: a step's few dozen rows cost pandas ~0.1 ms per
    # Series operation, the arrays a few microseconds.
    cur, peer_z, peer_med = (df[c].to_numpy(float) for c in ("cur", "peer_z", "peer_med"))
    hist_med, hist_sigma = (df[c].to_numpy(float) for c in ("hist_med", "hist_sigma"))
    # the floor at the share of the series' interval the window is (window.py: a counter sampled
    # slower than the step), where the peer scores give it
    floor = df["window_floor" if "window_floor" in df.columns else "floor"].to_numpy(float)
    sigma0 = np.where(np.isnan(hist_sigma), 0.0, hist_sigma)
    own = (cur - hist_med) / np.maximum(sigma0, floor)
    df["baseline"] = np.where(np.isnan(hist_med), peer_med, hist_med)
    score = np.where(~np.isnan(own), np.minimum(peer_z, own), NO_HISTORY_DISCOUNT * peer_z)
    # no peer score (a series with no peers): its own history alone, on a floor relative to its
    # own level; without history there is nothing to compare it with (score NaN, never a candidate).
    solo = np.isnan(peer_z)
    if solo.any():
        solo_floor = np.maximum.reduce(
            [sigma0[solo], SOLO_REL_FLOOR * np.abs(hist_med[solo]), SOLO_FLOOR_SHARE * floor[solo]]
        )
        score[solo] = (cur[solo] - hist_med[solo]) / solo_floor
    df["score"] = score
    if "cur_w" in df.columns:  # anomalous only through the seconds before the window (AFTERMATH_S)?
        mad = df["peer_mad"].to_numpy(float)
        z_now = (df["cur_w"].to_numpy(float) - peer_med) / np.maximum(np.where(np.isnan(mad), 0.0, mad), floor)
        df["aftermath"] = df["metric"].isin(AFTERMATH_S.keys()).to_numpy() & ~(z_now >= MIN_SCORE)
    return df


def candidates(scored: pd.DataFrame, topo: Topo) -> pd.DataFrame:
    """Sum each anomalous series' weighted evidence onto the (layer, component) it points at."""
    df = scored[scored["score"] >= MIN_SCORE].copy()
    if df.empty:
        return df.assign(layer=[], component=[], weight=[], contrib=[])
    cls = df["role"].where(~df["role"].isin(SWITCH_ROLES), "switch")
    sig = [SIGNALS.get((c, m)) for c, m in zip(cls, df["metric"], strict=False)]
    df["layer"] = [s[0] if s else None for s in sig]
    df["target"] = [s[1] if s else None for s in sig]
    df["weight"] = [s[2] if s else 0.0 for s in sig]
    df = df[df["layer"].notna()]
    comp = []
    layer = []
    for src, tgt, lay in zip(df["source"], df["target"], df["layer"], strict=False):
        c = topo.peer.get(src, src) if tgt == "peer" else (topo.link_name(src) if tgt == "link" else src)
        c = topo.host_nic.get(src, src) if tgt == "host_nic" else c
        if lay == "@peer":
            lay = "nic" if topo.role.get(c) == "nic" else "fabric"
        comp.append(c)
        layer.append(lay)
    df["component"] = comp
    df["layer"] = layer
    df["contrib"] = df["weight"] * np.log2(1.0 + df["score"])
    if "aftermath" in df.columns:
        df["contrib"] = np.where(df["aftermath"].fillna(False).astype(bool), AFTERMATH_WEIGHT, 1.0) * df["contrib"]
    return df


def rank_candidates(ev: pd.DataFrame, layers: tuple[str, ...]) -> pd.DataFrame:
    sub = ev[ev["layer"].isin(layers)]
    if sub.empty:
        return pd.DataFrame(columns=["layer", "component", "total", "origin"])
    out = sub.groupby(["layer", "component"], as_index=False).agg(total=("contrib", "sum"), origin=("weight", "max"))
    return out.sort_values(["total"], ascending=False, kind="stable").reset_index(drop=True)
