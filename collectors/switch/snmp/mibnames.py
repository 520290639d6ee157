"""MIB object names -> numeric OIDs, for walks net-snmp printed with its MIBs loaded (its default:
``IF-MIB::ifHCInOctets.1 = Counter64: 908950``) or without them (``iso.3.6.1.2.1.2.2.1.10.1``,
``SNMPv2-SMI::mib-2.2.2.1.10.1``, ``SNMPv2-SMI::enterprises.9...``).

A table, not a MIB compiler: the objects the SNMP parser reads (oids.STANDARD and the names it needs
to place them: ifName, ifDescr, sysUpTime), plus the module prefixes net-snmp prints when it has no MIB
for an OID. An object is looked up by its name alone: these names are unique across the MIBs that
print them (``ifInOctets`` is IF-MIB's under RFC1213-MIB too; ``sysUpTimeInstance`` is DISMAN-EVENT's
or DISMAN-EXPRESSION's name for sysUpTime.0). Any other name is not translated, and the caller says so.
"""

from __future__ import annotations

import re

_IF = "1.3.6.1.2.1.2.2.1."  # IF-MIB ifTable
_IFX = "1.3.6.1.2.1.31.1.1.1."  # IF-MIB ifXTable
_STATS = "1.3.6.1.2.1.10.7.2.1."  # EtherLike-MIB dot3StatsTable
_PAUSE = "1.3.6.1.2.1.10.7.10.1."  # EtherLike-MIB dot3PauseTable
_HCSTATS = "1.3.6.1.2.1.10.7.11.1."  # EtherLike-MIB dot3HCStatsTable

_IF_COLUMNS = ("ifIndex", "ifDescr", "ifType", "ifMtu", "ifSpeed", "ifPhysAddress", "ifAdminStatus", "ifOperStatus",
               "ifLastChange", "ifInOctets", "ifInUcastPkts", "ifInNUcastPkts", "ifInDiscards", "ifInErrors",
               "ifInUnknownProtos", "ifOutOctets", "ifOutUcastPkts", "ifOutNUcastPkts", "ifOutDiscards",
               "ifOutErrors", "ifOutQLen", "ifSpecific")
_IFX_COLUMNS = ("ifName", "ifInMulticastPkts", "ifInBroadcastPkts", "ifOutMulticastPkts", "ifOutBroadcastPkts",
                "ifHCInOctets", "ifHCInUcastPkts", "ifHCInMulticastPkts", "ifHCInBroadcastPkts", "ifHCOutOctets",
                "ifHCOutUcastPkts", "ifHCOutMulticastPkts", "ifHCOutBroadcastPkts", "ifLinkUpDownTrapEnable",
                "ifHighSpeed", "ifPromiscuousMode", "ifConnectorPresent", "ifAlias", "ifCounterDiscontinuityTime")

OBJECTS: dict[str, str] = {
    "sysDescr": "1.3.6.1.2.1.1.1", "sysUpTime": "1.3.6.1.2.1.1.3", "sysUpTimeInstance": "1.3.6.1.2.1.1.3.0",
    "sysName": "1.3.6.1.2.1.1.5",
    **{name: f"{_IF}{n}" for n, name in enumerate(_IF_COLUMNS, start=1)},
    **{name: f"{_IFX}{n}" for n, name in enumerate(_IFX_COLUMNS, start=1)},
    "dot3StatsFCSErrors": _STATS + "3", "dot3StatsSymbolErrors": _STATS + "18",
    "dot3InPauseFrames": _PAUSE + "3", "dot3OutPauseFrames": _PAUSE + "4",
    "dot3HCInPauseFrames": _PAUSE + "5", "dot3HCOutPauseFrames": _PAUSE + "6",
    "dot3HCStatsFCSErrors": _HCSTATS + "2", "dot3HCStatsSymbolErrors": _HCSTATS + "6",
}

# What net-snmp prints for an OID it has no MIB name for: a module's node name, then the numbers.
PREFIXES: dict[str, str] = {"iso": "1", "SNMPv2-SMI::internet": "1.3.6.1", "SNMPv2-SMI::mib-2": "1.3.6.1.2.1",
                            "SNMPv2-SMI::enterprises": "1.3.6.1.4.1", "SNMPv2-SMI::experimental": "1.3.6.1.3"}

_NAMED = re.compile(r"^(?:(?P<module>[A-Za-z][\w-]*)::)?(?P<object>[A-Za-z][\w-]*)(?P<index>(?:\.\d+)*)$")


def numeric(oid: str) -> str | None:
    """``oid`` as printed -> its numeric form (no leading dot); None where the name is not in the tables or its
    index is not numbers (a string index printed as text, ``'T.u...'``)."""
    if oid[:1] == "." or oid[:1].isdigit():
        return oid.lstrip(".") if all(part.isdigit() for part in oid.lstrip(".").split(".")) else None
    for prefix, number in PREFIXES.items():
        if oid == prefix or oid.startswith(prefix + "."):
            rest = oid[len(prefix):]
            return number + rest if all(p.isdigit() for p in rest.split(".")[1:]) else None
    m = _NAMED.match(oid)
    if m is None or m["object"] not in OBJECTS:
        return None
    return OBJECTS[m["object"]] + m["index"]
