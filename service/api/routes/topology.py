"""PUT/GET /v1/topology and POST /v1/topology/links (LLDP discovery merges)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from fabricscope.service.api.deps import AdminAuth, ConnDep, ReadAuth, answered, by_size
from fabricscope.service.db import inventory
from fabricscope.service.schemas import LinksMerge, Topology

router = APIRouter(prefix="/v1/topology", tags=["inventory"])


def _check_links(topo_links: list[Any], field: str) -> None:
    for i, link in enumerate(topo_links):
        if link.a == link.b:
            raise HTTPException(422, detail=[{"loc": ["body", field, i, "b"], "msg": "a link joins two different "
                                              "endpoints (a == b)", "type": "value_error"}])


@router.put("", dependencies=[AdminAuth], summary="Replace the declared topology")
def put_topology(body: Topology, conn: ConnDep) -> dict[str, int]:
    _check_links(body.links, "links")
    names = [d.name for d in body.devices]
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name not in seen:
            seen.add(name)
            continue
        raise HTTPException(422, detail=[{"loc": ["body", "devices", i, "name"],
                                          "msg": f"device '{names[i]}' is declared twice", "type": "value_error"}])
    return inventory.replace_topology(conn, devices=[d.model_dump(exclude_none=True) for d in body.devices],
                                      links=[link.model_dump() for link in body.links])


@router.get("", dependencies=[ReadAuth, by_size("topology")], summary="The topology: devices, interfaces, links")
def get_topology(request: Request, conn: ConnDep) -> dict[str, Any]:
    out = inventory.get_topology(conn)
    answered(request, len(out["devices"]) + sum(len(d.get("interfaces", ())) for d in out["devices"])
             + len(out["links"]))
    return out


@router.post("/links", dependencies=[AdminAuth], summary="Merge links (for example discovered by LLDP)")
def merge_links(body: LinksMerge, conn: ConnDep) -> dict[str, int]:
    _check_links(body.links, "links")
    n = inventory.merge_links(conn, links=[link.model_dump() for link in body.links], discovered=body.discovered)
    return {"merged": n}
