"""Path and query parameters several routers share: one rule for a job name, one for a time window."""

from __future__ import annotations

from datetime import datetime

from fastapi import HTTPException, Path

from fabricscope.service import contract
from fabricscope.service.api.deps import ConnDep

# The same rule as the job of ingest bodies: a name a job URL could not address is never created.
JobName = Path(min_length=contract.MIN_TEXT, max_length=contract.MAX_TEXT,
               pattern=contract.schema_pattern(contract.JOB_BODY), description="Job name, e.g. llama-70b-run3")


def known_job(conn: ConnDep, job: str) -> None:
    if conn.execute("SELECT 1 FROM jobs WHERE name = %s", (job,)).fetchone() is None:
        raise HTTPException(404, detail=f"job '{job}' is unknown")


def _tz(value: datetime | None, field: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise HTTPException(422, detail=[{"loc": ["query", field], "msg": "timestamp needs a time zone offset",
                                          "type": "timestamp_parsing"}])
    return value


def window(from_: datetime | None, to: datetime | None) -> tuple[datetime | None, datetime | None]:
    """`from`/`to` with a time zone each, and `to` not before `from` (422 naming the field)."""
    start, end = _tz(from_, "from"), _tz(to, "to")
    if start is not None and end is not None and end < start:
        raise HTTPException(422, detail=[{"loc": ["query", "to"], "msg": "'to' is before 'from'",
                                          "type": "value_error"}])
    return start, end
