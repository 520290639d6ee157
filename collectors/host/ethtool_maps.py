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
drivers/net/virtio_net.c, drivers/net/veth.c.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str]
    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0


@dataclass(frozen=True, slots=True)
class DriverMap:
    name: str
    rules: tuple[Rule, ...]
    ignore: tuple[re.Pattern[str], ...] = field(default_factory=tuple)


_US = 1e-6


def _r(pattern: str, metric: str, labels: dict[str, str] | None = None, scale: float = 1.0) -> Rule:
    return Rule(re.compile(pattern), metric, tuple(sorted((labels or {}).items())), scale)


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
    ),
    ignore=_ig(r"(rx|tx|ch|ptp)\d+_.*", r"rx_xsk_.*", r"tx_xsk_.*", r"rx_global_pause", r"tx_global_pause"),
)

BNXT = DriverMap(
    "bnxt_en",
    rules=(
        _r(r"rx_bytes", "rx_bytes_total"),
        _r(r"tx_bytes", "tx_bytes_total"),
        _r(r"rx_total_frames", "rx_packets_total"),
        _r(r"tx_total_frames", "tx_packets_total"),
        _r(r"rx_total_discard_pkts", "rx_discards_total"),
        _r(r"tx_total_discard_pkts", "tx_discards_total"),
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
)

# ice prints "rx_bytes.nic", i40e "port.rx_bytes"; one table covers both spellings.
_P, _S = r"(?:port\.)?", r"(?:\.nic)?"
INTEL = DriverMap(
    "ice/i40e",
    rules=(
        _r(_P + r"rx_bytes" + _S, "rx_bytes_total"),
        _r(_P + r"tx_bytes" + _S, "tx_bytes_total"),
        _r(_P + r"rx_(?:unicast|multicast|broadcast)" + _S, "rx_packets_total"),
        _r(_P + r"tx_(?:unicast|multicast|broadcast)" + _S, "tx_packets_total"),
        _r(_P + r"rx_dropped" + _S, "rx_discards_total"),
        _r(_P + r"tx_errors" + _S, "tx_errors_total"),
        _r(_P + r"rx_crc_errors" + _S, "rx_fcs_errors_total"),
        _r(_P + r"link_xoff_rx" + _S, "rx_pause_frames_total"),
        _r(_P + r"link_xoff_tx" + _S, "tx_pause_frames_total"),
        _r(_P + r"rx_priority_(\d)_xoff(?:_rx)?" + _S, "rx_pause_frames_total", _PRIO),
        _r(_P + r"tx_priority_(\d)_xoff(?:_tx)?" + _S, "tx_pause_frames_total", _PRIO),
    ),
    # Netdev-level duplicates (rx_packets, rx_bytes without suffix on ice are the VSI totals that
    # /sys statistics already has) stay as extras; only per-queue counters are dropped.
    ignore=_ig(r"(rx|tx)[-_](queue_)?\d+[._].*", r"(rx|tx)-\d+\..*", r"veb\..*"),
)

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
)

VETH = DriverMap(
    "veth",
    # veth's ethtool counters are XDP ring counters; /sys statistics carry the totals.
    rules=(),
    ignore=_ig(r"peer_ifindex", r"(rx|tx)_queue_\d+_.*"),
)

# Unknown drivers: keep every key as an extra; map nothing (sysfs statistics give the basics).
GENERIC = DriverMap("generic", rules=())

DRIVERS: dict[str, DriverMap] = {
    "mlx5_core": MLX5,
    "bnxt_en": BNXT,
    "ice": INTEL,
    "i40e": INTEL,
    "virtio_net": VIRTIO,
    "veth": VETH,
}


def driver_map(driver: str | None) -> DriverMap:
    return DRIVERS.get(driver or "", GENERIC)
