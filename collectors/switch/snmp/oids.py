"""Numeric OID → canonical metric tables (Debian ships no IETF MIB files, so no MIB lookups).

A :class:`Column` is one table column. Several columns may feed one metric: the lowest ``rank``
present for an interface wins (64-bit HC columns are rank 0, their 32-bit fallbacks rank 1), and
columns sharing metric and rank are summed (unicast + multicast + broadcast packets). ``index``
says how the row index reads (:data:`INDEXES`): ``if`` = ifIndex, ``if.prio`` = ifIndex then a PFC
priority (the ``priority`` label), ``if.queue`` = ifIndex then an egress queue number (the ``queue``
label), ``if.queue.sum`` = ifIndex, queue, then one more component whose rows are summed (Arista
splits each queue by packet type, Catalyst by drop threshold). Vendor tables are data selected by
the inventory's vendor hint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Transform = Literal["oper_up", "speed32"] | None
Index = Literal["if", "if.prio", "if.queue", "if.queue.sum"]

# Row index layout → (components after the column OID, label the second component becomes).
# A third component (``if.queue.sum``) is summed over: it is not a label.
INDEXES: dict[str, tuple[int, str | None]] = {
    "if": (1, None),
    "if.prio": (2, "priority"),
    "if.queue": (2, "queue"),
    "if.queue.sum": (3, "queue"),
}


@dataclass(frozen=True, slots=True)
class Column:
    oid: str
    metric: str
    rank: int = 0
    scale: float = 1.0
    index: Index = "if"
    transform: Transform = None
    labels: tuple[tuple[str, str], ...] = ()


SYS_UPTIME = "1.3.6.1.2.1.1.3.0"
SYS_NAME = "1.3.6.1.2.1.1.5.0"
IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"
IF_DESCR = "1.3.6.1.2.1.2.2.1.2"
IF_COUNTER_DISCONTINUITY = "1.3.6.1.2.1.31.1.1.1.19"

_IF = "1.3.6.1.2.1.2.2.1."  # IF-MIB ifTable
_IFX = "1.3.6.1.2.1.31.1.1.1."  # IF-MIB ifXTable
_PAUSE = "1.3.6.1.2.1.10.7.10.1."  # EtherLike-MIB dot3PauseTable
_STATS = "1.3.6.1.2.1.10.7.2.1."  # EtherLike-MIB dot3StatsTable
_HCSTATS = "1.3.6.1.2.1.10.7.11.1."  # EtherLike-MIB dot3HCStatsTable

STANDARD: tuple[Column, ...] = (
    Column(_IFX + "6", "rx_bytes_total"),  # ifHCInOctets
    Column(_IF + "10", "rx_bytes_total", rank=1),  # ifInOctets
    Column(_IFX + "10", "tx_bytes_total"),  # ifHCOutOctets
    Column(_IF + "16", "tx_bytes_total", rank=1),  # ifOutOctets
    Column(_IFX + "7", "rx_packets_total"),  # ifHCInUcastPkts
    Column(_IFX + "8", "rx_packets_total"),  # ifHCInMulticastPkts
    Column(_IFX + "9", "rx_packets_total"),  # ifHCInBroadcastPkts
    Column(_IFX + "11", "tx_packets_total"),  # ifHCOutUcastPkts
    Column(_IFX + "12", "tx_packets_total"),  # ifHCOutMulticastPkts
    Column(_IFX + "13", "tx_packets_total"),  # ifHCOutBroadcastPkts
    # An agent with no ifXTable (printers, old or small switches) has only ifTable's 32-bit unicast and
    # non-unicast counts; together they are every packet, as the three HC columns are.
    Column(_IF + "11", "rx_packets_total", rank=1),  # ifInUcastPkts
    Column(_IF + "12", "rx_packets_total", rank=1),  # ifInNUcastPkts
    Column(_IF + "17", "tx_packets_total", rank=1),  # ifOutUcastPkts
    Column(_IF + "18", "tx_packets_total", rank=1),  # ifOutNUcastPkts
    Column(_IF + "13", "rx_discards_total"),  # ifInDiscards
    Column(_IF + "14", "rx_errors_total"),  # ifInErrors
    Column(_IF + "19", "tx_discards_total"),  # ifOutDiscards
    Column(_IF + "20", "tx_errors_total"),  # ifOutErrors
    Column(_IF + "8", "oper_up", transform="oper_up"),  # ifOperStatus
    Column(_IFX + "15", "speed_bps", scale=1e6),  # ifHighSpeed (Mb/s)
    Column(_IF + "5", "speed_bps", rank=1, transform="speed32"),  # ifSpeed (b/s, saturates)
    Column(_HCSTATS + "2", "rx_fcs_errors_total"),  # dot3HCStatsFCSErrors
    Column(_STATS + "3", "rx_fcs_errors_total", rank=1),  # dot3StatsFCSErrors
    Column(_HCSTATS + "6", "symbol_errors_total"),  # dot3HCStatsSymbolErrors
    Column(_STATS + "18", "symbol_errors_total", rank=1),  # dot3StatsSymbolErrors
    Column(_PAUSE + "5", "rx_pause_frames_total"),  # dot3HCInPauseFrames
    Column(_PAUSE + "3", "rx_pause_frames_total", rank=1),  # dot3InPauseFrames
    Column(_PAUSE + "6", "tx_pause_frames_total"),  # dot3HCOutPauseFrames
    Column(_PAUSE + "4", "tx_pause_frames_total", rank=1),  # dot3OutPauseFrames
)

# IEEE8021-PFC-MIB ieee8021PfcIfTable (augments ifEntry): PFC frames summed over priorities.
# "Requests" are PFC frames this port sent, "Indications" ones it received (802.1Qbb).
IEEE_PFC: tuple[Column, ...] = (
    Column("1.3.111.2.802.1.1.21.1.1.1.2", "tx_pause_frames_total", labels=(("priority", "all"),)),
    Column("1.3.111.2.802.1.1.21.1.1.1.3", "rx_pause_frames_total", labels=(("priority", "all"),)),
)

# CISCO-PFC-EXT-MIB cpfcIfPriorityTable, indexed by ifIndex and priority 0..7 (Nexus).
CISCO_PFC: tuple[Column, ...] = (
    Column("1.3.6.1.4.1.9.9.813.1.2.1.2", "tx_pause_frames_total", index="if.prio"),
    Column("1.3.6.1.4.1.9.9.813.1.2.1.3", "rx_pause_frames_total", index="if.prio"),
)

# JUNIPER-COS-MIB jnxCosQstatTable, index ifIndex.queueNr (0..63; the forwarding class → queue map is
# jnxCosFcTable). QedBytes counts bytes ever queued, not depth: depth is DepthCurrent (Junos ≥ 15.1).
# TotalDropPkts (col 53) is newer than TailDrop + TotalRedDrop, which it equals; older Junos (the
# recorded MX960 on 16.1) answer only the two parts, hence the rank-1 pair.
_JNX_Q = "1.3.6.1.4.1.2636.3.15.4.1."
JUNIPER_COS: tuple[Column, ...] = (
    Column(_JNX_Q + "7", "tx_queue_packets_total", index="if.queue"),  # jnxCosQstatTxedPkts
    Column(_JNX_Q + "9", "tx_queue_bytes_total", index="if.queue"),  # jnxCosQstatTxedBytes
    Column(_JNX_Q + "53", "queue_dropped_packets_total", index="if.queue"),  # jnxCosQstatTotalDropPkts
    Column(_JNX_Q + "11", "queue_dropped_packets_total", rank=1, index="if.queue"),  # jnxCosQstatTailDropPkts
    Column(_JNX_Q + "13", "queue_dropped_packets_total", rank=1, index="if.queue"),  # jnxCosQstatTotalRedDropPkts
    Column(_JNX_Q + "58", "queue_occupancy_bytes", index="if.queue"),  # jnxCosQstatDepthCurrent
    Column(_JNX_Q + "59", "queue_watermark_bytes", index="if.queue"),  # jnxCosQstatDepthPeak
)

# ARISTA-QUEUE-MIB aristaEgressQueueTable (aristaMibs 6), index ifIndex.queue.packetType (unicast 0,
# multicast 1, mixed 2): the packet types of one queue are summed into that queue's counter.
_ARISTA_EQ = "1.3.6.1.4.1.30065.3.6.1.2.1."
ARISTA_QUEUE: tuple[Column, ...] = (
    Column(_ARISTA_EQ + "4", "tx_queue_packets_total", index="if.queue.sum"),  # aristaEgressQueuePkts
    Column(_ARISTA_EQ + "5", "tx_queue_bytes_total", index="if.queue.sum"),  # aristaEgressQueueBytes
    Column(_ARISTA_EQ + "6", "queue_dropped_packets_total", index="if.queue.sum"),  # aristaEgressQueuePktsDropped
)

# CISCO-PORT-QOS-MIB cportQosEgressQueueStatsTable (Catalyst 3750/3560 "show mls qos interface
# statistics"), index ifIndex.cportQosQueueId.cportQosQueueThreshold: each queue (1-based, as IOS
# numbers them) is split by drop threshold (1..3), so the thresholds of one queue are summed.
# Enqueued packets were admitted to the queue, i.e. sent from it: drops happen before enqueueing.
_CPORT_EQ = "1.3.6.1.4.1.9.9.189.1.3.5.1."
CISCO_PORT_QOS: tuple[Column, ...] = (
    Column(_CPORT_EQ + "3", "tx_queue_packets_total", index="if.queue.sum"),  # cportQosQueueEnqueuePkts
    Column(_CPORT_EQ + "4", "queue_dropped_packets_total", index="if.queue.sum"),  # cportQosQueueDropPkts
)

# Vendor hint (inventory ``vendor:``) → extra tables polled on top of STANDARD and IEEE_PFC.
VENDOR_TABLES: dict[str, tuple[Column, ...]] = {
    "cisco": CISCO_PFC + CISCO_PORT_QOS,
    "juniper": JUNIPER_COS,
    "arista": ARISTA_QUEUE,
}


def columns_for(vendor: str | None) -> tuple[Column, ...]:
    return STANDARD + IEEE_PFC + VENDOR_TABLES.get(vendor or "", ())


def vendor_in(oid_list: Iterable[str]) -> str | None:
    """The vendor whose tables a recorded walk answers most (tables are not merged: columns of one
    metric in one table are summed, so two vendors' columns for a metric would never be complete)."""
    prefixes = {c.oid + ".": vendor for vendor, cols in VENDOR_TABLES.items() for c in cols}
    hits: dict[str, int] = {}
    for oid in oid_list:
        head = oid.lstrip(".")
        for _ in range(3):
            head = head.rpartition(".")[0]
            vendor = prefixes.get(head + ".")
            if vendor:
                hits[vendor] = hits.get(vendor, 0) + 1
                break
    return max(hits, key=lambda v: hits[v]) if hits else None


# LLDP-MIB (IEEE 802.1AB-2005). lldpRemTable index: TimeMark.LocalPortNum.RemIndex.
LLDP_LOC_PORT_ID_SUBTYPE = "1.0.8802.1.1.2.1.3.7.1.2"
LLDP_LOC_PORT_ID = "1.0.8802.1.1.2.1.3.7.1.3"
LLDP_LOC_PORT_DESC = "1.0.8802.1.1.2.1.3.7.1.4"
LLDP_REM_CHASSIS_ID = "1.0.8802.1.1.2.1.4.1.1.5"
LLDP_REM_PORT_ID_SUBTYPE = "1.0.8802.1.1.2.1.4.1.1.6"
LLDP_REM_PORT_ID = "1.0.8802.1.1.2.1.4.1.1.7"
LLDP_REM_PORT_DESC = "1.0.8802.1.1.2.1.4.1.1.8"
LLDP_REM_SYS_NAME = "1.0.8802.1.1.2.1.4.1.1.9"

LLDP_COLUMNS: tuple[str, ...] = (
    LLDP_LOC_PORT_ID_SUBTYPE,
    LLDP_LOC_PORT_ID,
    LLDP_LOC_PORT_DESC,
    LLDP_REM_CHASSIS_ID,
    LLDP_REM_PORT_ID_SUBTYPE,
    LLDP_REM_PORT_ID,
    LLDP_REM_PORT_DESC,
    LLDP_REM_SYS_NAME,
)
