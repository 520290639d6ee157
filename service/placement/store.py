"""The placement audit of a stored job: its ranks and labels from the inventory, audited."""

from __future__ import annotations

from typing import Any

import psycopg

from fabricscope.service.db import inventory
from fabricscope.service.placement.audit import audit


def job_audit(conn: psycopg.Connection, *, job: str, gpus_per_nic: int) -> dict[str, Any] | None:
    """The audit of ``job`` (None if the job is unknown)."""
    stored = inventory.get_job(conn, job=job)
    if stored is None:
        return None
    return {"job": job, **audit(stored["ranks"], labels=stored["labels"], gpus_per_nic=gpus_per_nic)}
