"""LLDP-MIB over SNMP: the local port and remote tables (numeric varbinds) → topology links."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from ..lldp import PORT_ID_IS_NAME, Link, peer_name, port_name
from . import oids
from .parse import Value, text


def links_from_snmp(
    device: str,
    varbinds: Iterable[tuple[str, Value]],
    speeds: Mapping[str, float] | None = None,
    if_names: Mapping[int, str] | None = None,
) -> list[Link]:
    """LLDP-MIB lldpLocPortTable + lldpRemTable varbinds → links (sorted, de-duplicated).

    ``if_names`` (ifIndex → ifName) resolves a local port whose id is a locally assigned number,
    which is how e.g. Junos fills lldpLocPortId: the number is the ifIndex.
    """
    loc: dict[str, dict[str, Value]] = defaultdict(dict)  # LocalPortNum → column → value
    rem: dict[tuple[str, str], dict[str, Value]] = defaultdict(dict)  # (LocalPortNum, RemIndex)
    for oid, raw in varbinds:
        oid = oid.lstrip(".")
        for col in oids.LLDP_COLUMNS:
            if oid.startswith(col + "."):
                idx = oid[len(col) + 1 :].split(".")
                if col.startswith("1.0.8802.1.1.2.1.3.7.1.") and len(idx) == 1:
                    loc[idx[0]][col] = raw
                elif len(idx) == 3:  # TimeMark.LocalPortNum.RemIndex; TimeMark is irrelevant
                    rem[(idx[1], idx[2])][col] = raw
                break
    links: set[Link] = set()
    for (port_num, _), row in rem.items():
        sys_name = text(row.get(oids.LLDP_REM_SYS_NAME, b""))
        if not sys_name:
            continue  # a neighbour without a system name cannot be matched to a device
        lrow = loc.get(port_num, {})
        subtype = lrow.get(oids.LLDP_LOC_PORT_ID_SUBTYPE)
        local = port_name(
            PORT_ID_IS_NAME.get(subtype) if isinstance(subtype, int) else None,
            text(lrow.get(oids.LLDP_LOC_PORT_ID, b"")),
            text(lrow.get(oids.LLDP_LOC_PORT_DESC, b"")),
        )
        rsub = row.get(oids.LLDP_REM_PORT_ID_SUBTYPE)
        remote = port_name(
            PORT_ID_IS_NAME.get(rsub) if isinstance(rsub, int) else None,
            text(row.get(oids.LLDP_REM_PORT_ID, b"")),
            text(row.get(oids.LLDP_REM_PORT_DESC, b"")),
        )
        if subtype == 7 and local.isdigit() and if_names and int(local) in if_names:
            local = if_names[int(local)]
        if not local or not remote:
            continue
        links.add(Link(f"{device}:{local}", f"{peer_name(sys_name)}:{remote}", (speeds or {}).get(local)))
    return sorted(links, key=lambda link: (link.a, link.b))
