"""LLDP neighbours → topology links ``{"a": "dev:port", "b": "peer:port", "speed_bps": …}``.

Sources: the LLDP-MIB remote table over SNMP (:mod:`.snmp.lldp`, pure parse of numeric varbinds)
and openconfig-lldp neighbour state (rows of ``local interface, neighbour state leaves`` from
NETCONF XML or gNMI), here.
Which remote field names the peer port depends on the port-id subtype; that is a table below.
Links are posted with ``discovered: true``; the server merges them into the declared topology.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from fabricscope.core.model import Link

# LldpPortIdSubtype (802.1AB): names we can use as a port name as-is. For the others (MAC address,
# network address, agent circuit id) the port description is the better name.
PORT_ID_IS_NAME = {1: True, 2: True, 5: True, 7: True, 3: False, 4: False, 6: False}
# openconfig-lldp PortIdType identities, same meaning
_OCPORT_ID_IS_NAME = {
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


def port_name(is_name: bool | None, port_id: str, port_desc: str) -> str:
    if is_name or not port_desc:
        return port_id
    return port_desc


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
        remote = port_name(_OCPORT_ID_IS_NAME.get(kind), state.get("port-id", ""), state.get("port-description", ""))
        if remote:
            links.add(Link(f"{device}:{local}", f"{peer_name(sys_name)}:{remote}", (speeds or {}).get(local)))
    return sorted(links, key=lambda link: (link.a, link.b))


def topology_body(links: Iterable[Link]) -> dict[str, Any]:
    """Body for ``POST /v1/topology/links``."""
    return {"links": [link.to_json() for link in links], "discovered": True}
