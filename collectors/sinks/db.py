"""DbSink: the HttpSender's queue, batching, retries and spool, writing straight to PostgreSQL.

For agents and collectors given a DSN instead of an API URL. Each batch is validated and stored by
exactly the code behind ``POST /v1/ingest/*`` (same checks, same idempotent batch ids), so the two
paths cannot drift. Imports the service package, so it is not for the training process.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import orjson
import psycopg

from fabricscope.collectors.sinks.http import HttpSender

log = logging.getLogger(__name__)


class DbSink(HttpSender):
    def __init__(self, dsn: str, *, spool_path: str | Path | None = None, spool_max_bytes: int = 64 << 20,
                 queue_max: int = 100_000, batch_max: int = 5000, flush_interval_s: float = 1.0,
                 timeout_s: float = 5.0, max_retries: int = 3) -> None:
        from fabricscope.service.db.writer import SampleWriter

        self._dsn = dsn
        self._conn: psycopg.Connection | None = None
        self._conn_lock = threading.Lock()
        self._writer = SampleWriter()
        super().__init__("http://db.invalid", spool_path=spool_path, spool_max_bytes=spool_max_bytes,
                         queue_max=queue_max, batch_max=batch_max, flush_interval_s=flush_interval_s,
                         timeout_s=timeout_s, max_retries=max_retries)

    def __repr__(self) -> str:  # never the DSN's password
        from fabricscope.service.db.database import redact

        return f"DbSink({redact(self._dsn)!r})"

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=max(1, int(self._timeout)))
        return self._conn

    def _http(self, method: str, path: str, data: bytes, gzipped: bool) -> tuple[int | None, float | None, str]:
        """Apply one batch to the database; answers like the API would (status, retry-after, detail)."""
        from fabricscope.service.db import inventory
        from fabricscope.service.ingest import contract, store
        from fabricscope.service.ingest import validate as v
        from fabricscope.service.ingest.errors import IngestError

        body: Any = orjson.loads(gzip.decompress(data) if gzipped else data)
        limits = v.Limits(50_000, contract.MIN_TS, time.time() + contract.MAX_FUTURE_S)
        try:
            with self._conn_lock:
                conn = self._connection()
                if method == "PUT":
                    job = urllib.parse.unquote(path.rsplit("/", 1)[1])
                    inventory.put_job(conn, job=job, ranks=body.get("ranks", []), labels=body.get("labels", {}))
                    return 200, None, ""
                kind = path.rsplit("/", 1)[1]
                if kind == "samples":
                    store.store_samples(conn, sample_writer=self._writer, batch_id=v.batch_id(body),
                                        cols=v.samples(body, limits))
                elif kind == "steps":
                    store.store_steps(conn, body=body, rows=v.steps(body, limits))
                elif kind == "collectives":
                    store.store_collectives(conn, body=body, rows=v.collectives(body, limits))
                else:
                    store.store_events(conn, body=body, rows=v.events(body, limits))
                return 200, None, ""
        except IngestError as exc:
            return exc.status_code, None, str(exc)
        except psycopg.OperationalError as exc:
            log.debug("database unreachable: %s", type(exc).__name__)
            self._conn = None
            return None, None, "database unreachable"
        except psycopg.errors.DataError as exc:
            return 422, None, str(exc).splitlines()[0]

    def close(self, timeout_s: float = 5.0) -> None:
        super().close(timeout_s)
        if self._conn is not None:
            self._conn.close()


__all__ = ["DbSink"]
