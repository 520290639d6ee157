"""One transaction per ingest batch: claim the batch id, write, commit, then update caches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from fabricscope.service.db import writer as w
from fabricscope.service.ingest import summaries as sm
from fabricscope.service.ingest import validate as v


def _dup(conn: psycopg.Connection, batch_id: str | None, kind: str, n: int) -> dict[str, Any] | None:
    prev = w.claim_batch(conn, batch_id=batch_id, kind=kind, accepted=n)
    if prev is None:
        return None
    return {"accepted": prev, "duplicate": True}


def store_samples(conn: psycopg.Connection, *, sample_writer: w.SampleWriter, batch_id: str | None,
                  cols: v.SampleColumns) -> dict[str, Any]:
    bid = batch_id
    with conn.transaction():
        dup = _dup(conn, bid, "samples", len(cols))
        if dup is not None:
            return dup
        written = sample_writer.write_samples(conn, cols)
    sample_writer.committed(written)
    return {"accepted": written.count}


def _store_rows(conn: psycopg.Connection, *, body: dict[str, Any], kind: str,
                write: Callable[[psycopg.Connection], int], job: str | None = None) -> dict[str, Any]:
    bid = v.batch_id(body)
    with conn.transaction():
        dup = _dup(conn, bid, kind, len(body[kind]))
        if dup is not None:
            return dup
        if job is not None:
            _ensure_job(conn, job)
        return {"accepted": write(conn)}


def store_steps(conn: psycopg.Connection, *, body: dict[str, Any], rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    job = v.job_name(body)
    return _store_rows(conn, body=body, kind="steps", job=job, write=lambda c: w.write_steps(c, job=job, rows=rows))


def store_collectives(conn: psycopg.Connection, *, body: dict[str, Any],
                      rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    job = v.job_name(body)
    return _store_rows(conn, body=body, kind="collectives", job=job,
                       write=lambda c: w.write_collectives(c, job=job, rows=rows))


def store_summaries(conn: psycopg.Connection, *, body: dict[str, Any],
                    rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    job = v.job_name(body)
    return _store_rows(conn, body=body, kind=sm.KIND, job=job,
                       write=lambda c: sm.write_summaries(c, job=job, rows=rows))


def store_events(conn: psycopg.Connection, *, body: dict[str, Any], rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    return _store_rows(conn, body=body, kind="events", write=lambda c: w.write_events(c, rows=rows))


def _ensure_job(conn: psycopg.Connection, job: str) -> None:
    conn.execute("INSERT INTO jobs (name) VALUES (%s) ON CONFLICT DO NOTHING", (job,))


def unknown_devices(conn: psycopg.Connection, *, sources: list[str]) -> list[str]:
    devices = sorted({s.partition(":")[0] for s in sources})
    known = {r[0] for r in conn.execute("SELECT name FROM devices WHERE name = ANY(%s)", (devices,)).fetchall()}
    return [d for d in devices if d not in known]
