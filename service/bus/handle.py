"""One bus message → the database, exactly as HTTP ingest does it (same validation, same stores).

Split in two so a writer can pipeline them: :meth:`Handler.prepare` (decode + validate: CPU, no
database) and :meth:`Handler.write` (one transaction with the batch-id claim). The outcome says
what to do with the message: ``ack`` (written, or a duplicate of a written batch), ``reject`` (bad
input: dead-letter it with the reason, never retry) or an exception the writer treats as an outage
(retry later; the message stays in the stream). A batch with some bad items is written without
them and acked; the bad items alone are dead-lettered (``Outcome.rejected``, service.ingest.partial).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from pydantic import ValidationError

from fabricscope.service.bus import codec, lenient
from fabricscope.service.db import inventory
from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.ingest import store
from fabricscope.service.ingest import summaries as sm
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.ingest.partial import Rejected, without_bad_items
from fabricscope.service.settings import Settings

# Connection-level trouble: the database is away or restarting. Anything else is about the data.
OUTAGE = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass(slots=True)
class Prepared:
    kind: str
    body: dict[str, Any]
    n: int
    columns: Any = None  # SampleColumns or rows, as validate returns them
    sources: list[str] = field(default_factory=list)
    rejected: Rejected | None = None  # its bad items, left out of ``body``


@dataclass(frozen=True, slots=True)
class Outcome:
    action: str  # "ack" | "reject"
    accepted: int = 0
    duplicate: bool = False
    reason: list[dict[str, Any]] | None = None
    rejected: Rejected | None = None


def _reject(exc: IngestError) -> Outcome:
    return Outcome("reject", reason=exc.detail())


class Handler:
    def __init__(self, settings: Settings, dsn: str) -> None:
        self._settings = settings
        self._dsn = dsn
        self._conn: psycopg.Connection | None = None
        self.sample_writer = SampleWriter()

    def _limits(self) -> v.Limits:
        s = self._settings
        return v.Limits(s.max_batch, s.min_ts, time.time() + s.max_future_s)

    # -- CPU side --------------------------------------------------------------------------------
    def prepare(self, subject: str, data: bytes, headers: dict[str, str] | None,
                fallback_id: str) -> Prepared | Outcome:
        kind = codec.kind_of(subject)
        if kind is None:
            return _reject(IngestError(["subject"], f"unknown subject {subject!r}", "value_error"))
        try:
            unreadable: dict[int, str] = {}
            try:
                body = codec.decode(data, headers, max_bytes=self._settings.max_body_bytes)
            except IngestError as exc:
                if exc.kind != "json_invalid" or kind == "jobs":
                    raise
                # valid JSON orjson cannot hold (#46 item 6): one bad item costs only itself
                body = lenient.decode(data, headers, max_bytes=self._settings.max_body_bytes)
                if type(body) is dict:
                    unreadable = lenient.split(body, kind)
            if type(body) is not dict:
                raise IngestError(["body"], "must be a JSON object", "model_type")
            if body.get("batch_id") is None:
                body["batch_id"] = fallback_id
            v.batch_id(body)
            first = body

            def items(check: Any) -> Any:
                return without_bad_items(first, kind, lenient.refusing(unreadable, kind, check, first))

            if kind == "samples":
                cols, body, bad = items(lambda b: v.samples(b, self._limits()))
                return Prepared(kind, body, len(cols), cols, sorted(set(cols.source)), bad)
            if kind in ("steps", "collectives", "collective_summaries"):
                check = {"steps": v.steps, "collectives": v.collectives, "collective_summaries": sm.summaries}[kind]
                v.job_name(body)
                rows, body, bad = items(lambda b: check(b, self._limits()))
                return Prepared(kind, body, len(rows), rows, rejected=bad)
            if kind == "events":
                rows, body, bad = items(lambda b: v.events(b, self._limits()))
                return Prepared(kind, body, len(rows), rows, sorted({r[1] for r in rows}), bad)
            return self._prepare_job(body)
        except IngestError as exc:
            return _reject(exc)

    def _prepare_job(self, body: dict[str, Any]) -> Prepared | Outcome:
        from fabricscope.service.schemas import JobIn  # pydantic only; the same model as PUT /v1/jobs

        job = v.job_name(body)
        try:
            parsed = JobIn.model_validate({k: body[k] for k in ("ranks", "labels") if k in body})
        except ValidationError as exc:
            e = exc.errors()[0]
            return _reject(IngestError(["body", *e["loc"]], e["msg"], e["type"]))
        ranks = [r.model_dump(exclude_none=True) for r in parsed.ranks]
        seen: set[int] = set()
        for i, r in enumerate(ranks):
            if r["rank"] in seen:
                return _reject(IngestError(["body", "ranks", i, "rank"], f"rank {r['rank']} appears twice"))
            seen.add(r["rank"])
        return Prepared("jobs", {"job": job, "labels": parsed.labels}, len(ranks), ranks)

    # -- database side ---------------------------------------------------------------------------
    def connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=3,
                                         application_name="fabricscope-writer")
        return self._conn

    def write(self, p: Prepared) -> Outcome:
        """Raises OUTAGE errors (retry later); bad data comes back as a ``reject`` outcome."""
        try:
            return self._write(self.connection(), p)
        except psycopg.errors.ProgramLimitExceeded as exc:  # an OperationalError, but about the data
            self.sample_writer.reset_caches()
            return _reject(IngestError(["body"], f"value rejected by the database: {str(exc).splitlines()[0]}"))
        except OUTAGE:
            self.drop_connection()
            raise
        except psycopg.DataError as exc:  # a value the database cannot hold: the sender's data
            self.sample_writer.reset_caches()
            return _reject(IngestError(["body"], f"value rejected by the database: {str(exc).splitlines()[0]}"))
        except BaseException:
            self.sample_writer.reset_caches()
            raise

    def _write(self, conn: psycopg.Connection, p: Prepared) -> Outcome:
        if self._settings.strict_sources and p.sources:
            unknown = store.unknown_devices(conn, sources=p.sources)
            if unknown:
                return _reject(IngestError(["body", p.kind], f"unknown device '{unknown[0]}' (strict sources)",
                                           "unknown_source"))
        if p.kind == "samples":
            out = store.store_samples(conn, sample_writer=self.sample_writer, batch_id=v.batch_id(p.body),
                                          cols=p.columns)
        elif p.kind == "steps":
            out = store.store_steps(conn, body=p.body, rows=p.columns)
        elif p.kind == "collectives":
            out = store.store_collectives(conn, body=p.body, rows=p.columns)
        elif p.kind == "collective_summaries":
            out = store.store_summaries(conn, body=p.body, rows=p.columns)
        elif p.kind == "events":
            out = store.store_events(conn, body=p.body, rows=p.columns)
        else:  # jobs: an upsert, idempotent by itself
            inventory.put_job(conn, job=p.body["job"], ranks=p.columns, labels=p.body["labels"])
            out = {"accepted": p.n}
        return Outcome("ack", int(out["accepted"]), bool(out.get("duplicate")), rejected=p.rejected)

    def drop_connection(self) -> None:
        # A transaction cut by an outage may have left ids in the writer's caches that were rolled
        # back (new series); forget them all, they are reloaded from the database.
        self.sample_writer.reset_caches()
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self.drop_connection()
