"""Per-driver mapping tables from ``ethtool -S`` keys onto docs/API.md canonical metrics.

Data, not code: each driver has ``rules`` (regex fullmatched against the key -> metric, labels,
scale) and ``ignore`` patterns. Keys matching a rule become canonical samples; several keys that
map to the same (metric, labels) are summed (virtio per-queue counters, i40e/ice unicast +
multicast + broadcast). Ignored keys are per-ring/per-channel duplicates of port totals (a 64-queue
mlx5 port has thousands) and non-counters such as ``peer_ifindex``. Every other key is kept as an
extra metric ``ethtool_<key>_total``.

Label values may reference regex groups as ``{1}``. Pause duration counters are microseconds in
mlx5 (``rx_prio3_pause_duration``) and bnxt_en (``pfc_pri3_rx_duration_us``); the ``direction``
label tells received pause (we were paused) from transmitted pause (we paused the peer).

Names follow the kernel sources: drivers/net/ethernet/mellanox/mlx5/core/en_stats.c,
broadcom/bnxt/bnxt_ethtool.c, intel/ice/ice_ethtool.c, intel/i40e/i40e_ethtool.c,
amazon/ena/ena_ethtool.c, google/gve/gve_ethtool.c, drivers/net/vmxnet3/vmxnet3_ethtool.c,
drivers/net/virtio_net.c, drivers/net/veth.c.

``distinctive`` lists keys only that driver prints: ``ethtool -S`` does not name its driver, and a
table is chosen by those keys, never by how many keys a table maps (a 64-queue E810's
``rx_queue_N_bytes`` keys would outvote everything for virtio_net). A rule's ``kind`` says whether
the value is a counter (summed when several keys map onto one series) or a gauge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str]
    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0
    kind: str = "counter"  # "gauge": a level, never summed


@dataclass(frozen=True, slots=True)
class DriverMap:
    name: str
    rules: tuple[Rule, ...]
    ignore: tuple[re.Pattern[str], ...] = field(default_factory=tuple)
    distinctive: tuple[re.Pattern[str], ...] = field(default_factory=tuple)  # keys no other driver prints


_US = 1e-6


def _r(pattern: str, metric: str, labels: dict[str, str] | None = None, scale: float = 1.0,
       kind: str = "counter") -> Rule:
    return Rule(re.compile(pattern), metric, tuple(sorted((labels or {}).items())), scale, kind)


def _ig(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


_PRIO = {"priority": "{1}"}

MLX5 = DriverMap(
    "mlx5_core",
    rules=(
        # *_phy counters are port (wire) counters: they include RoCE traffic that bypasses the
        # netdev, so they win over /sys/class/net statistics.
        _r(r"rx_bytes_phy", "rx_bytes_total"),
        _r(r"tx_bytes_phy", "tx_bytes_total"),
        _r(r"rx_packets_phy", "rx_packets_total"),
        _r(r"tx_packets_phy", "tx_packets_total"),
        _r(r"rx_discards_phy", "rx_discards_total"),
        _r(r"tx_discards_phy", "tx_discards_total"),
        _r(r"tx_errors_phy", "tx_errors_total"),
        _r(r"rx_out_of_buffer", "rx_out_of_buffer_total"),
        _r(r"rx_crc_errors_phy", "rx_fcs_errors_total"),
        _r(r"rx_symbol_err_phy", "symbol_errors_total"),
        _r(r"link_down_events_phy", "link_down_total"),
        _r(r"rx_ecn_mark", "ecn_marked_packets_total"),
        # Global (802.3x) pause is unlabelled; PFC carries the priority.
        _r(r"rx_pause_ctrl_phy", "rx_pause_frames_total"),
        _r(r"tx_pause_ctrl_phy", "tx_pause_frames_total"),
        _r(r"rx_prio(\d)_pause", "rx_pause_frames_total", _PRIO),
        _r(r"tx_prio(\d)_pause", "tx_pause_frames_total", _PRIO),
        _r(r"rx_prio(\d)_pause_duration", "pause_duration_seconds_total",
           {"priority": "{1}", "direction": "rx"}, _US),
        _r(r"tx_prio(\d)_pause_duration", "pause_duration_seconds_total",
           {"priority": "{1}", "direction": "tx"}, _US),
        _r(r"rx_global_pause_duration", "pause_duration_seconds_total", {"direction": "rx"}, _US),
        _r(r"tx_global_pause_duration", "pause_duration_seconds_total", {"direction": "tx"}, _US),
        # Per-priority drops of the port's receive buffer (PFC-protected traffic dropped anyway).
        _r(r"rx_prio(\d)_discards", "rx_discards_total", _PRIO),
        # Percent (0-100) of the last second with outbound PCIe reads/writes stalled: a gauge.
        _r(r"outbound_pci_stalled_rd", "pcie_outbound_stalled_ratio", {"direction": "read"}, 0.01, "gauge"),
        _r(r"outbound_pci_stalled_wr", "pcie_outbound_stalled_ratio", {"direction": "write"}, 0.01, "gauge"),
    ),
    ignore=_ig(r"(rx|tx|ch|ptp)\d+_.*", r"rx_xsk_.*", r"tx_xsk_.*", r"rx_global_pause", r"tx_global_pause",
               r"outbound_pci_stalled_(rd|wr)_events"),
    distinctive=_ig(r"\w+_phy", r"rx_vport_\w+", r"tx_vport_\w+", r"rx_out_of_buffer", r"rx_cache_reuse",
                    r"rx_mpwqe_\w+", r"ch\d+_\w+", r"outbound_pci_stalled_\w+"),
)

BNXT = DriverMap(
    "bnxt_en",
    rules=(
        _r(r"rx_bytes", "rx_bytes_total"),
        _r(r"tx_bytes", "tx_bytes_total"),
        _r(r"rx_total_frames", "rx_packets_total"),
        _r(r"tx_total_frames", "tx_packets_total"),
        # Ring discards: before Linux 6.4 (bnxt_sw_func_stats) "rx_total_discard_pkts"; from 6.4
        # (bnxt_ring_err_stats_arr) the ring drops are split by cause and summed here.
        _r(r"rx_total_discard_pkts", "rx_discards_total"),
        _r(r"tx_total_discard_pkts", "tx_discards_total"),
        _r(r"rx_total_(?:ring|oom|netpoll|buf_errors)_discards|rx_total_buf_errors", "rx_discards_total"),
        _r(r"tx_total_ring_discards", "tx_discards_total"),
        # The port MAC's own discards (held-back bnxt_en 6.6: 49,337 beside the rings' 655 M), and
        # per-CoS-queue discards (packets only; the *_bytes_cos keys are octets) labelled by queue.
        _r(r"rx_stat_discard", "rx_discards_total"),
        _r(r"tx_stat_discard", "tx_discards_total"),
        _r(r"rx_discard_packets_cos(\d)", "rx_discards_total", {"queue": "{1}"}),
        _r(r"rx_fcs_err_frames", "rx_fcs_errors_total"),
        _r(r"rx_pcs_symbol_err", "symbol_errors_total"),
        _r(r"tx_err", "tx_errors_total"),
        _r(r"link_down_events", "link_down_total"),
        _r(r"rx_pause_frames", "rx_pause_frames_total"),
        _r(r"tx_pause_frames", "tx_pause_frames_total"),
        _r(r"rx_pfc_ena_frames_pri(\d)", "rx_pause_frames_total", _PRIO),
        _r(r"tx_pfc_ena_frames_pri(\d)", "tx_pause_frames_total", _PRIO),
        _r(r"pfc_pri(\d)_rx_duration_us", "pause_duration_seconds_total",
           {"priority": "{1}", "direction": "rx"}, _US),
        _r(r"pfc_pri(\d)_tx_duration_us", "pause_duration_seconds_total",
           {"priority": "{1}", "direction": "tx"}, _US),
    ),
    # Ring counters print as "[3]: rx_ucast_packets".
    ignore=_ig(r"\[\d+\]: .*"),
    distinctive=_ig(r"rx_total_\w+", r"tx_total_\w+", r"rx_\w+_frames", r"tx_\w+_frames",
                    r"rx_pfc_ena_frames_pri\d", r"pfc_pri\d_\w+", r"rx_pcs_symbol_err", r"\[\d+\]: rx_l4_csum_errors"),
)

# ice prints the port's own counters as "rx_bytes.nic", i40e as "port.rx_bytes"; one table covers both
# spellings. The unsuffixed "rx_bytes" is the VSI's (the netdev's), already in /sys statistics: only
# the port keys map, never both (they would be summed).
def _port(name: str) -> str:
    return rf"(?:port\.{name}|{name}\.nic)"

INTEL = DriverMap(
    "ice/i40e",
    rules=(
        _r(_port(r"rx_bytes"), "rx_bytes_total"),
        _r(_port(r"tx_bytes"), "tx_bytes_total"),
        _r(_port(r"rx_(?:unicast|multicast|broadcast)"), "rx_packets_total"),
        _r(_port(r"tx_(?:unicast|multicast|broadcast)"), "tx_packets_total"),
        _r(_port(r"rx_dropped"), "rx_discards_total"),
        # The VSI's rx_dropped is the queues' no-descriptor drops (GLV_RDPC), after the port's own
        # (GLPRT_RDPC): two stages, no overlap, summed (held-back i40e 2.3.2-k: 179,160 of them).
        _r(r"rx_dropped", "rx_discards_total"),
        _r(_port(r"tx_errors"), "tx_errors_total"),
        _r(_port(r"rx_crc_errors"), "rx_fcs_errors_total"),
        _r(_port(r"link_xoff_rx"), "rx_pause_frames_total"),
        _r(_port(r"link_xoff_tx"), "tx_pause_frames_total"),
        _r(_port(r"rx_priority_(\d)_xoff(?:_rx)?"), "rx_pause_frames_total", _PRIO),
        _r(_port(r"tx_priority_(\d)_xoff(?:_tx)?"), "tx_pause_frames_total", _PRIO),
        _r(_port(r"rx_length_errors"), "rx_errors_total"),
        _r(_port(r"rx_(?:undersize|oversize|fragments|jabber)"), "rx_errors_total"),
        _r(_port(r"tx_dropped_link_down"), "tx_discards_total"),
    ),
    # Netdev-level duplicates (rx_packets, rx_bytes without suffix on ice are the VSI totals that
    # /sys statistics already has) stay as extras; per-queue counters are dropped (the port's own
    # counters above are the totals), xon counters are kept as extras.
    ignore=_ig(r"(rx|tx)[-_](queue_)?\d+[._].*", r"(rx|tx)-\d+\..*", r"veb\..*"),
)
ICE = replace(INTEL, name="ice", distinctive=_ig(r"[\w.]+\.nic"))
I40E = replace(INTEL, name="i40e", distinctive=_ig(r"port\.\w+", r"veb\.\w+", r"(rx|tx)-\d+\.\w+"))

VIRTIO = DriverMap(
    "virtio_net",
    rules=(
        # Before Linux 6.9 only per-queue counters; later kernels print totals (rx_drops) too.
        _r(r"rx_queue_\d+_drops", "rx_discards_total"),
        _r(r"rx_drops", "rx_discards_total"),
        _r(r"rx_queue_\d+_packets", "rx_packets_total"),
        _r(r"rx_queue_\d+_bytes", "rx_bytes_total"),
        _r(r"tx_queue_\d+_packets", "tx_packets_total"),
        _r(r"tx_queue_\d+_bytes", "tx_bytes_total"),
    ),
    ignore=_ig(r"(rx|tx)_queue_\d+_.*", r"(rx|tx)\d+_.*"),
    # kicks (virtqueue notifications) exist only in virtio; veth shares the xdp/drops names.
    # (a bare tx_timeouts is printed by gve and others too).
    distinctive=_ig(r"(rx|tx)(_queue_)?\d*_kicks", r"(rx|tx)(_queue_)?\d*_tx_timeouts"),
)

# AWS ENA: the allowance counters are the platform's drop signal (packets shaped or dropped because
# the instance exceeded its bandwidth/pps/connection-tracking allowance); byte and packet totals
# are per-queue sums.
_LIMIT = {"limit": "{1}"}
ENA = DriverMap(
    "ena",
    rules=(
        _r(r"(bw_in|bw_out|pps|conntrack|linklocal)_allowance_exceeded", "allowance_exceeded_total", _LIMIT),
        _r(r"queue_\d+_rx_cnt", "rx_packets_total"),
        _r(r"queue_\d+_rx_bytes", "rx_bytes_total"),
        _r(r"queue_\d+_tx_cnt", "tx_packets_total"),
        _r(r"queue_\d+_tx_bytes", "tx_bytes_total"),
    ),
    ignore=_ig(r"queue_\d+_.*", r"ena_admin_q_.*", r"conntrack_allowance_available"),
    distinctive=_ig(r"\w+_allowance_(exceeded|available)", r"queue_\d+_(tx|rx)_\w+", r"ena_admin_q_\w+",
                    r"admin_q_pause", r"wd_expired", r"io_(suspend|resume)"),
)

# Google gve (GCE gVNIC): device totals, plus the NIC's own "no buffers posted" drops per ring.
GVE = DriverMap(
    "gve",
    rules=(
        _r(r"rx_bytes", "rx_bytes_total"),
        _r(r"tx_bytes", "tx_bytes_total"),
        _r(r"rx_packets", "rx_packets_total"),
        _r(r"tx_packets", "tx_packets_total"),
        _r(r"rx_dropped", "rx_discards_total"),
        _r(r"tx_dropped", "tx_discards_total"),
        _r(r"rx_no_buffers_posted\[\d+\]", "rx_out_of_buffer_total"),
    ),
    ignore=_ig(r"\w+\[\d+\]", r"adminq_\w+"),
    distinctive=_ig(r"\w+\[\d+\]", r"adminq_\w+", r"interface_(up|down)_cnt", r"rx_desc_err_dropped_pkt",
                    r"stats_report_trigger_cnt"),
)

# VMware vmxnet3: per-queue blocks ("Tx Queue#: 0" then "  ucast pkts tx: ...") repeat the same
# key names; the parser numbers repeats "key#1", "key#2" and the rules sum them.
_REP = r"(?:#\d+)?"
VMXNET3 = DriverMap(
    "vmxnet3",
    rules=(
        _r(r"(?:ucast|mcast|bcast) pkts rx" + _REP, "rx_packets_total"),
        _r(r"(?:ucast|mcast|bcast) bytes rx" + _REP, "rx_bytes_total"),
        _r(r"(?:ucast|mcast|bcast) pkts tx" + _REP, "tx_packets_total"),
        _r(r"(?:ucast|mcast|bcast) bytes tx" + _REP, "tx_bytes_total"),
        _r(r"pkts rx OOB" + _REP, "rx_discards_total"),
        _r(r"drv dropped rx total" + _REP, "rx_discards_total"),
        _r(r"pkts tx discard" + _REP, "tx_discards_total"),
        _r(r"drv dropped tx total" + _REP, "tx_discards_total"),
        _r(r"pkts rx err" + _REP, "rx_errors_total"),
        _r(r"pkts tx err" + _REP, "tx_errors_total"),
    ),
    ignore=_ig(r"(Tx|Rx) Queue#" + _REP),
    distinctive=_ig(r"(Tx|Rx) Queue#" + _REP, r"\w+ pkts (rx|tx)" + _REP, r"drv dropped (rx|tx) total" + _REP),
)

VETH = DriverMap(
    "veth",
    # veth's ethtool counters are XDP ring counters; /sys statistics carry the totals.
    rules=(),
    ignore=_ig(r"peer_ifindex", r"(rx|tx)_queue_\d+_.*"),
    distinctive=_ig(r"peer_ifindex", r"(rx|tx)_queue_\d+_xdp_xmit\w*"),
)

# Unknown drivers: keep every key as an extra; map nothing (sysfs statistics give the basics).
GENERIC = DriverMap("generic", rules=())

DRIVERS: dict[str, DriverMap] = {
    "mlx5_core": MLX5,
    "bnxt_en": BNXT,
    "ice": ICE,
    "i40e": I40E,
    "virtio_net": VIRTIO,
    "veth": VETH,
    "ena": ENA,
    "gve": GVE,
    "vmxnet3": VMXNET3,
}


def stat_key(name: str, seen: set[str] | dict[str, float]) -> str:
    """The key a stat name is kept under: stripped (vmxnet3 indents its per-queue names), and numbered
    ``name#1``, ``name#2``... when printed again (per-queue blocks without a queue number), so that no
    value overwrites another. ``ethtool -S`` text and the SIOCETHTOOL reader name keys alike."""
    key = name.strip()
    if key not in seen:
        return key
    n = 1
    while f"{key}#{n}" in seen:
        n += 1
    return f"{key}#{n}"


def driver_map(driver: str | None) -> DriverMap:
    return DRIVERS.get(driver or "", GENERIC)
