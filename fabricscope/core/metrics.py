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
]}

# Extra metrics that collectors emit on purpose, outside the canonical table (stored like any other).
KNOWN_EXTRAS: dict[str, Metric] = {m.name: m for m in [
    Metric("carrier_transitions_total", "counter", "openconfig carrier-transitions: link up and down events"),
]}


def is_canonical(metric: str) -> bool:
    return metric in CATALOGUE

