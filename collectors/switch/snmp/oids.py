"""Numeric OID → canonical metric tables (Debian ships no IETF MIB files, so no MIB lookups).

A :class:`Column` is one table column. Several columns may feed one metric: the lowest ``rank``
present for an interface wins (64-bit HC columns are rank 0, their 32-bit fallbacks rank 1), and
columns sharing metric and rank are summed (unicast + multicast + broadcast packets). ``index``
says how the row index reads: ``if`` = ifIndex, ``if.prio`` = ifIndex then a PFC priority (which
becomes the ``priority`` label). Vendor tables are data selected by the inventory's vendor hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Transform = Literal["oper_up", "speed32"] | None


@dataclass(frozen=True, slots=True)
class Column:
    oid: str
    metric: str
    rank: int = 0
    scale: float = 1.0
    index: Literal["if", "if.prio"] = "if"
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

# Vendor hint (inventory ``vendor:``) → extra tables polled on top of STANDARD and IEEE_PFC.
VENDOR_TABLES: dict[str, tuple[Column, ...]] = {
    "cisco": CISCO_PFC,
}


def columns_for(vendor: str | None) -> tuple[Column, ...]:
    return STANDARD + IEEE_PFC + VENDOR_TABLES.get(vendor or "", ())


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
