"""The canonical metric catalogue (docs/API.md "Names"): what collectors map vendor names onto.

Data, not code: one row per metric with its kind and unit. Collectors' mapping tables (ethtool key,
OID, YANG path → metric) target these names; the engine reads them; tests/test_metric_catalogue.py
checks that this table and docs/API.md's agree. Unknown extra metrics are still allowed and stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge"]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: Kind
    meaning: str
    labels: tuple[str, ...] = ()


def _rows(kind: Kind, meaning: str, *names: str, labels: tuple[str, ...] = ()) -> list[Metric]:
    return [Metric(n, kind, meaning, labels) for n in names]


CATALOGUE: dict[str, Metric] = {m.name: m for m in [
    *_rows("counter", "octets", "rx_bytes_total", "tx_bytes_total"),
    *_rows("counter", "packets", "rx_packets_total", "tx_packets_total"),
    *_rows("counter", "dropped for lack of buffer/queue", "rx_discards_total", "tx_discards_total"),
    *_rows("counter", "all errors", "rx_errors_total", "tx_errors_total"),
    *_rows("counter", "CRC/FCS and PHY symbol errors", "rx_fcs_errors_total", "symbol_errors_total"),
    *_rows("counter", "pause/PFC frames", "rx_pause_frames_total", "tx_pause_frames_total",
           labels=("priority",)),
    *_rows("counter", "time paused, where reported", "pause_duration_seconds_total"),
    *_rows("counter", "packets CE-marked (switch egress queue or NIC rx)", "ecn_marked_packets_total",
           labels=("queue",)),
    *_rows("counter", "RoCE congestion notification packets sent / acted on", "cnp_sent_total", "cnp_handled_total"),
    *_rows("counter", "NIC drops for no receive buffer", "rx_out_of_buffer_total"),
    *_rows("counter", "InfiniBand ticks with data waiting to send", "port_xmit_wait_total"),
    *_rows("counter", "out-of-sequence/NAK retransmits, local ACK timeouts", "rdma_retransmits_total",
           "rdma_timeouts_total"),
    *_rows("counter", "carrier losses / link downed", "link_down_total"),
    *_rows("gauge", "state, line rate, buffer use", "oper_up", "speed_bps", "queue_occupancy_bytes"),
    *_rows("counter", "storage I/O", "read_bytes_total", "write_bytes_total", "read_ops_total", "write_ops_total"),
    *_rows("gauge", "mean latency over the sample interval", "read_latency_seconds", "write_latency_seconds"),
    # Egress queues of switch ports (#16): label `queue` (the traffic class as the device names it).
    *_rows("counter", "packets / octets sent from one egress queue", "tx_queue_packets_total",
           "tx_queue_bytes_total", labels=("queue",)),
    *_rows("counter", "packets one egress queue dropped (tail drop, WRED)", "queue_dropped_packets_total",
           labels=("queue",)),
    *_rows("gauge", "peak queue/buffer use since the last read (or the device's max watermark); ingress "
           "priority groups carry `priority_group` and `buffer` (shared|headroom) instead of `queue`",
           "queue_watermark_bytes", labels=("queue", "priority_group", "buffer")),
    *_rows("counter", "PFC watchdog: storms detected (queue stopped honouring pause)", "pfc_deadlock_total",
           labels=("queue",)),
    *_rows("counter", "InfiniBand link error recoveries (retraining without going down)",
           "link_error_recovery_total"),
    # GPUs (#17): source `host:gpuN`.
    *_rows("gauge", "GPU SM / memory clock now, and the SM clock's maximum", "gpu_sm_clock_hz",
           "gpu_memory_clock_hz", "gpu_sm_clock_max_hz"),
    *_rows("gauge", "1 while the GPU's clocks are held down for this reason (power_cap, hw_slowdown, "
           "sw_thermal, hw_thermal, hw_power_brake, sync_boost)", "gpu_throttle_active", labels=("reason",)),
    *_rows("gauge", "GPU board power / temperature", "gpu_power_watts", "gpu_temperature_celsius"),
    *_rows("gauge", "share of time the GPU / its memory was busy (0-1)", "gpu_utilization_ratio",
           "gpu_memory_utilization_ratio"),
    *_rows("gauge", "share of time the graphics/compute engine was active (0-1), per MIG instance where labelled",
           "gpu_engine_active_ratio", labels=("mig",)),
    *_rows("counter", "GPU ECC errors (label type corrected|uncorrected, scope volatile|aggregate)",
           "gpu_ecc_errors_total", labels=("type", "scope")),
    *_rows("counter", "GPU memory pages retired / rows remapped (label cause or kind)", "gpu_retired_pages_total",
           "gpu_remapped_rows_total", labels=("cause",)),
    *_rows("counter", "NVLink errors (label type crc_flit|crc_data|replay|recovery, link)", "gpu_nvlink_errors_total",
           labels=("type", "link")),
    *_rows("counter", "PCIe replays (link-level retransmissions)", "pcie_replays_total"),
    *_rows("gauge", "PCIe link generation and width now, and their maximum (GPUs and NICs)", "pcie_link_generation",
           "pcie_link_generation_max", "pcie_link_width", "pcie_link_width_max"),
    # Hosts (#17): source `host`.
    *_rows("counter", "TCP segments sent / retransmitted, RTO timeouts, lost retransmits, listen drops",
           "tcp_out_segments_total", "tcp_retransmitted_segments_total", "tcp_timeouts_total",
           "tcp_lost_retransmits_total", "tcp_listen_drops_total"),
    *_rows("counter", "packets the kernel dropped before the stack (softnet backlog full) / softirq budget ran out",
           "softnet_dropped_total", "softnet_time_squeeze_total"),
    *_rows("counter", "PSI stall time (label level some|full, cgroup where per cgroup)", "cpu_pressure_seconds_total",
           "io_pressure_seconds_total", "memory_pressure_seconds_total", "irq_pressure_seconds_total",
           labels=("level", "cgroup")),
    *_rows("counter", "CPU thermal throttle events (label scope core|package)", "cpu_thermal_throttle_total",
           labels=("scope",)),
    # Issue #43: cloud NIC allowances (ENA) and PCIe credit stalls (mlx5), from ethtool -S.
    *_rows("counter", "packets queued or dropped because a cloud NIC's allowance was exceeded (label limit)",
           "allowance_exceeded_total", labels=("limit",)),
    *_rows("gauge", "share of the last second a NIC's outbound PCIe reads/writes stalled for credits (0-1)",
           "pcie_outbound_stalled_ratio", labels=("direction",)),
]}

# Extra metrics that collectors emit on purpose, outside the canonical table (stored like any other).
KNOWN_EXTRAS: dict[str, Metric] = {m.name: m for m in [
    Metric("carrier_transitions_total", "counter", "openconfig carrier-transitions: link up and down events"),
]}


def is_canonical(metric: str) -> bool:
    return metric in CATALOGUE

