"""Database transport for the collectors' sender: batches written straight to PostgreSQL.

For agents and collectors given a DSN instead of an API URL (``make_sink("postgresql://...")``
loads this module by name, so collectors never import the service). Each batch is validated and
stored by exactly the code behind ``POST /v1/ingest/*`` (same checks, same idempotent batch ids),
so the two paths cannot drift, and the answer is mapped as the API's status would be: bad data
is ``rejected`` (naming the bad items as a 422 does), an unreachable database is ``retry``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson
import psycopg
from pydantic import ValidationError

from fabricscope.core.transport import OK, Batch, Outcome, http_outcome, named_items
from fabricscope.service import contract
from fabricscope.service.db import inventory
from fabricscope.service.db.database import redact
from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.ingest import store
from fabricscope.service.ingest import summaries as sm
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.schemas import JobIn

log = logging.getLogger(__name__)

_MAX_ITEMS = 50_000


class DbTransport:
    def __init__(self, dsn: str, *, timeout_s: float = 5.0) -> None:
        self._dsn = dsn
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()
        self._writer = SampleWriter()

    def __repr__(self) -> str:  # never the DSN's password
        return f"DbTransport({redact(self._dsn)!r})"

    def send(self, batch: Batch) -> Outcome:
        body: Any = orjson.loads(batch.text)  # a private copy: validation must not touch a spooled batch
        try:
            with self._lock:
                self._store(self._connection(), batch, body)
            return OK
        except IngestError as exc:
            return http_outcome(exc.status_code, str(exc), items=named_items(exc.detail(), batch.kind))
        except psycopg.errors.ProgramLimitExceeded as exc:  # an OperationalError, but about the data
            return Outcome("rejected", str(exc).splitlines()[0])
        except psycopg.OperationalError as exc:
            log.debug("database unreachable: %s", type(exc).__name__)
            self._conn = None
            return Outcome("retry", "database unreachable")
        except psycopg.errors.DataError as exc:
            return Outcome("rejected", str(exc).splitlines()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=max(1, int(self.timeout_s)))
        return self._conn

    def _store(self, conn: psycopg.Connection, batch: Batch, body: Any) -> None:
        if batch.kind == "job":
            job = v.job_name({"job": batch.job})
            placement = _placement(body)
            try:
                inventory.put_job(conn, job=job, ranks=[r.model_dump(exclude_none=True) for r in placement.ranks],
                                  labels=placement.labels)
            except inventory.JobLabelsTooLarge as exc:
                raise IngestError(["body", "labels"], str(exc)) from exc
            return
        limits = v.Limits(_MAX_ITEMS, contract.MIN_TS, time.time() + contract.MAX_FUTURE_S)
        if batch.kind == "samples":
            store.store_samples(conn, sample_writer=self._writer, batch_id=v.batch_id(body),
                                cols=v.samples(body, limits))
        elif batch.kind == "steps":
            store.store_steps(conn, body=body, rows=v.steps(body, limits))
        elif batch.kind == "collectives":
            store.store_collectives(conn, body=body, rows=v.collectives(body, limits))
        elif batch.kind == "collective_summaries":
            store.store_summaries(conn, body=body, rows=sm.summaries(body, limits))
        else:
            store.store_events(conn, body=body, rows=v.events(body, limits))


def _placement(body: Any) -> JobIn:
    """A job registration checked by the model behind PUT /v1/jobs (the same bounds, the same words)."""
    try:
        return JobIn.model_validate(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise IngestError(["body", *e["loc"]], e["msg"], e["type"]) from exc


__all__ = ["DbTransport"]
