"""LLDP neighbours → topology links ``{"a": "dev:port", "b": "peer:port", "speed_bps": …}``.

Sources: the LLDP-MIB remote table over SNMP (pure parse of numeric varbinds) and openconfig-lldp
neighbour state (rows of ``local interface, neighbour state leaves`` from NETCONF XML or gNMI).
Which remote field names the peer port depends on the port-id subtype; that is a table below.
Links are posted with ``discovered: true``; the server merges them into the declared topology.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .snmp import oids
from .snmp.parse import Value, text


@dataclass(frozen=True, slots=True)
class Link:
    a: str
    b: str
    speed_bps: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"a": self.a, "b": self.b}
        if self.speed_bps:
            out["speed_bps"] = self.speed_bps
        return out


# LldpPortIdSubtype (802.1AB): names we can use as a port name as-is. For the others (MAC address,
# network address, agent circuit id) the port description is the better name.
_PORT_ID_IS_NAME = {1: True, 2: True, 5: True, 7: True, 3: False, 4: False, 6: False}
# openconfig-lldp PortIdType identities, same meaning
_OC_PORT_ID_IS_NAME = {
    "INTERFACE_ALIAS": True,
    "PORT_COMPONENT": True,
    "INTERFACE_NAME": True,
    "LOCAL": True,
    "MAC_ADDRESS": False,
    "NETWORK_ADDRESS": False,
    "AGENT_CIRCUIT_ID": False,
}


def peer_name(system_name: str) -> str:
    """Inventory names are short: ``leaf1.dc1.example.com`` → ``leaf1``; IP addresses stay whole."""
    name = system_name.strip()
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        return name.split(".", 1)[0]


def _port(is_name: bool | None, port_id: str, port_desc: str) -> str:
    if is_name or not port_desc:
        return port_id
    return port_desc


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
        local = _port(
            _PORT_ID_IS_NAME.get(subtype) if isinstance(subtype, int) else None,
            text(lrow.get(oids.LLDP_LOC_PORT_ID, b"")),
            text(lrow.get(oids.LLDP_LOC_PORT_DESC, b"")),
        )
        rsub = row.get(oids.LLDP_REM_PORT_ID_SUBTYPE)
        remote = _port(
            _PORT_ID_IS_NAME.get(rsub) if isinstance(rsub, int) else None,
            text(row.get(oids.LLDP_REM_PORT_ID, b"")),
            text(row.get(oids.LLDP_REM_PORT_DESC, b"")),
        )
        if subtype == 7 and local.isdigit() and if_names and int(local) in if_names:
            local = if_names[int(local)]
        if not local or not remote:
            continue
        links.add(Link(f"{device}:{local}", f"{peer_name(sys_name)}:{remote}", (speeds or {}).get(local)))
    return sorted(links, key=lambda link: (link.a, link.b))


def links_from_openconfig(
    device: str, rows: Iterable[tuple[str, Mapping[str, str]]], speeds: Mapping[str, float] | None = None
) -> list[Link]:
    """openconfig-lldp ``interfaces/interface[name]/neighbors/neighbor/state`` leaves → links."""
    links: set[Link] = set()
    for local, state in rows:
        sys_name = state.get("system-name", "")
        if not local or not sys_name:
            continue
        kind = state.get("port-id-type", "").rpartition(":")[2]
        remote = _port(_OC_PORT_ID_IS_NAME.get(kind), state.get("port-id", ""), state.get("port-description", ""))
        if remote:
            links.add(Link(f"{device}:{local}", f"{peer_name(sys_name)}:{remote}", (speeds or {}).get(local)))
    return sorted(links, key=lambda link: (link.a, link.b))


def topology_body(links: Iterable[Link]) -> dict[str, Any]:
    """Body for ``POST /v1/topology/links``."""
    return {"links": [link.to_json() for link in links], "discovered": True}
