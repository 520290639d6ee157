"""Switch-port PMA counters (``perfquery -x LID PORT``) → canonical samples ``switch:port``.

The text is parsed by the host agent's :func:`~fabricscope.collectors.host.rdma.parse_perfquery`
(one parser for both), which yields the kernel's sysfs counter names; this table maps those onto
the canonical metrics. PortXmitData/PortRcvData count 4-octet words, hence the scale 4.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricscope.collectors.host.rdma import parse_perfquery
from fabricscope.core.model import Sample

# sysfs/perfquery counter name → (canonical metric, scale)
SWITCH_PORT_COUNTERS: dict[str, tuple[str, float]] = {
    "port_xmit_data": ("tx_bytes_total", 4.0),  # PortXmitData
    "port_rcv_data": ("rx_bytes_total", 4.0),  # PortRcvData
    "port_xmit_packets": ("tx_packets_total", 1.0),  # PortXmitPkts
    "port_rcv_packets": ("rx_packets_total", 1.0),  # PortRcvPkts
    "port_xmit_wait": ("port_xmit_wait_total", 1.0),  # PortXmitWait
    "port_xmit_discards": ("tx_discards_total", 1.0),  # PortXmitDiscards
    "port_rcv_errors": ("rx_errors_total", 1.0),  # PortRcvErrors
    "symbol_error": ("symbol_errors_total", 1.0),  # SymbolErrorCounter
    "link_downed": ("link_down_total", 1.0),  # LinkDownedCounter
    "link_error_recovery": ("link_error_recovery_total", 1.0),  # LinkErrorRecoveryCounter
}


def port_samples(counters: Mapping[str, float], source: str, ts: float) -> list[Sample]:
    """One port's counters (sysfs names) → samples; counters outside the table are left out."""
    out = []
    for name, value in counters.items():
        hit = SWITCH_PORT_COUNTERS.get(name)
        if hit is not None:
            out.append(Sample(ts, source, hit[0], value * hit[1]))
    return out


def perfquery_samples(text: str, switch: str, ts: float) -> list[Sample]:
    """``perfquery -x`` output of one switch (any number of ports) → samples ``switch:port``."""
    return [s for port, counters in sorted(parse_perfquery(text).items())
            for s in port_samples(counters, f"{switch}:{port}", ts)]  # fmt: skip
