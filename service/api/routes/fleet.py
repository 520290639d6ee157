"""GET /v1/fleet/components, /v1/fleet/components/{component} and /v1/fleet/layers (#48): GPU-hours
lost across jobs, from the fleet ledger (service/fleet)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query

from fabricscope.service import contract
from fabricscope.service.api.deps import ConnDep, HeavyRead, ReadAuth
from fabricscope.service.fleet.queries import Window, incidents, ranking
from fabricscope.service.fleet.rollup import KINDS

router = APIRouter(prefix="/v1/fleet", tags=["fleet"], dependencies=[ReadAuth])

DEFAULT_SPAN = timedelta(days=7)
MAX_SPAN = timedelta(days=400)
MAX_TS = 7_258_118_400.0  # 2200-01-01

FromQ = Annotated[datetime | None, Query(alias="from", description="RFC 3339, rounded down to its UTC day; "
                                                                   "default: `to` minus 7 days")]
ToQ = Annotated[datetime | None, Query(description="RFC 3339; default: now")]
LayerQ = Annotated[Literal["compute", "host", "nic", "link", "fabric", "storage", "unknown"] | None,
                   Query(description="Only causes of this layer")]
KindQ = Annotated[str | None, Query(description="Only components of this kind: " + " | ".join(KINDS))]
LimitQ = Annotated[int, Query(ge=1, le=1000, description="At most this many rows")]


def _bad(field: str, msg: str) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["query", field], "msg": msg, "type": "value_error"}])


def _window(from_: datetime | None, to: datetime | None) -> Window:
    for name, v in (("from", from_), ("to", to)):
        if v is not None and v.tzinfo is None:
            raise _bad(name, "timestamp needs a time zone offset")
        if v is not None and not contract.MIN_TS <= v.timestamp() <= MAX_TS:
            raise _bad(name, "timestamp out of range (2000 to 2200)")
    to = to or datetime.now(UTC)
    w = Window.of(from_ or to - DEFAULT_SPAN, to)
    if w.hi <= w.lo:
        raise _bad("to", "must be after from")
    if w.hi - w.lo > MAX_SPAN:
        raise _bad("from", f"window longer than {MAX_SPAN.days} days")
    return w


def _kind(kind: str | None) -> str | None:
    if kind is not None and kind not in KINDS:
        raise _bad("kind", "one of " + ", ".join(KINDS))
    return kind


def _head(w: Window) -> dict[str, Any]:
    return {"from": w.lo, "to": w.hi, "previous_from": w.prev, "unit": "gpu_hours"}


@router.get("/components", dependencies=[HeavyRead], summary="Components ranked by GPU-hours lost across jobs")
def get_components(conn: ConnDep, from_: FromQ = None, to: ToQ = None, layer: LayerQ = None, kind: KindQ = None,
                   limit: LimitQ = 20) -> dict[str, Any]:
    w = _window(from_, to)
    rows = ranking(conn, by="component", window=w, layer=layer, kind=_kind(kind), limit=limit)
    return {**_head(w), "layer": layer, "kind": kind, "components": rows}


@router.get("/layers", dependencies=[HeavyRead], summary="Layers ranked by GPU-hours lost across jobs")
def get_layers(conn: ConnDep, from_: FromQ = None, to: ToQ = None, limit: LimitQ = 20) -> dict[str, Any]:
    w = _window(from_, to)
    return {**_head(w), "layers": ranking(conn, by="layer", window=w, layer=None, kind=None, limit=limit)}


@router.get("/components/{component:path}", dependencies=[HeavyRead],
            summary="One component's incidents: runs of slow steps with their jobs, evidence and counters")
def get_component(conn: ConnDep,
                  component: Annotated[str, Path(min_length=1, max_length=512)],
                  from_: FromQ = None, to: ToQ = None,
                  gap: Annotated[int, Query(ge=0, le=1_000_000, description="Slow steps at most this many "
                                                                            "steps apart are one incident")] = 20,
                  limit: LimitQ = 100) -> dict[str, Any]:
    w = _window(from_, to)
    rows = ranking(conn, by="component", window=w, layer=None, kind=None, limit=1, only=component)
    if not rows:
        raise HTTPException(404, detail=f"component '{component}' lost no time in the window")
    return {**_head(w), "component": component, "summary": rows[0],
            "incidents": incidents(conn, component=component, window=w, gap_steps=gap, limit=limit)}
