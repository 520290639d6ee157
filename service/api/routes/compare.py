"""GET /v1/jobs/{a}/compare/{b} (#48): why run b is slower or faster than run a."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from fabricscope.service.api.deps import ConnDep, HeavyRead, ReadAuth
from fabricscope.service.fleet.compare import compare

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[ReadAuth])

JobPath = Annotated[str, Path(min_length=1, max_length=512)]


@router.get("/{a}/compare/{b}", dependencies=[HeavyRead],
            summary="The difference in median step time of two runs, decomposed and explained")
def get_compare(conn: ConnDep, a: JobPath, b: JobPath,
                steps: Annotated[int, Query(ge=10, le=100_000, description="The last this many steps of each run")]
                = 2000) -> dict[str, Any]:
    out = compare(conn, a=a, b=b, max_steps=steps)
    if out is None:
        missing = [j for j in (a, b) if not conn.execute("SELECT 1 FROM jobs WHERE name = %s", (j,)).fetchone()]
        raise HTTPException(404, detail=f"job '{missing[0] if missing else a}' is unknown")
    return out
