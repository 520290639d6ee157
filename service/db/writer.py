"""The direct writer: resolves series ids, computes rates, and COPYs batches in one transaction.

Used by the HTTP ingest routes, by ``DbSink`` (agents writing straight to the database) and by the
NATS writers. Caches (names → ids, last point per series) are per process; a cache miss costs one
query per batch, never one per row.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import psycopg
from psycopg.types.json import Jsonb

from collectors.rates import series_rates
from service.db.copybin import iso_utc, samples_copy_payload
from service.ingest.validate import SampleColumns

SeriesKey = tuple[str, str, str]  # (source, metric, labels as sorted JSON or "")


@dataclass(frozen=True, slots=True)
class Written:
    count: int
    last: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # newest points, sorted by (series, ts)


def _labels_key(labels: dict[str, str] | None) -> str:
    return orjson.dumps(labels, option=orjson.OPT_SORT_KEYS).decode() if labels else ""


def split_source(name: str) -> tuple[str, str | None]:
    device, sep, interface = name.partition(":")
    return device, (interface if sep else None)


class SampleWriter:
    def __init__(self) -> None:
        self._series: dict[SeriesKey, int] = {}
        self._counter: dict[int, bool] = {}  # series id → is a counter
        self._last: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def reset_caches(self) -> None:
        with self._lock:
            self._series.clear()
            self._counter.clear()
            self._last.clear()

    # -- dictionaries -------------------------------------------------------------------------
    def _resolve(self, conn: psycopg.Connection, keys: list[SeriesKey]) -> None:
        missing = sorted({k for k in keys if k not in self._series})
        if not missing:
            return
        srcs = sorted({k[0] for k in missing})
        mets = sorted({k[1] for k in missing})
        devs = [split_source(s) for s in srcs]
        conn.execute(
            "INSERT INTO sources (name, device, interface) SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])"
            " ON CONFLICT (name) DO NOTHING",
            (srcs, [d for d, _ in devs], [i for _, i in devs]),
        )
        conn.execute(
            "INSERT INTO metrics (name, kind) SELECT * FROM unnest(%s::text[], %s::text[])"
            " ON CONFLICT (name) DO NOTHING",
            (mets, ["counter" if m.endswith("_total") else "gauge" for m in mets]),
        )
        rows = conn.execute(
            """
            WITH k AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(source, metric, labels)),
            ins AS (
              INSERT INTO series (source_id, metric_id, labels)
              SELECT s.id, m.id, CASE WHEN k.labels = '' THEN '{}'::jsonb ELSE k.labels::jsonb END
              FROM k JOIN sources s ON s.name = k.source JOIN metrics m ON m.name = k.metric
              ON CONFLICT (source_id, metric_id, labels) DO NOTHING
            )
            SELECT k.source, k.metric, k.labels, se.id, m.kind
            FROM k JOIN sources s ON s.name = k.source JOIN metrics m ON m.name = k.metric
            JOIN series se ON se.source_id = s.id AND se.metric_id = m.id
             AND se.labels = CASE WHEN k.labels = '' THEN '{}'::jsonb ELSE k.labels::jsonb END
            """,
            ([k[0] for k in missing], [k[1] for k in missing], [k[2] for k in missing]),
        ).fetchall()
        found = {(r[0], r[1], r[2]): (r[3], r[4] == "counter") for r in rows}
        if len(found) < len(missing):
            # Rows inserted by this statement are invisible to its own SELECT: read them back.
            rows = conn.execute(
                """
                SELECT k.source, k.metric, k.labels, se.id, m.kind
                FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(source, metric, labels)
                JOIN sources s ON s.name = k.source JOIN metrics m ON m.name = k.metric
                JOIN series se ON se.source_id = s.id AND se.metric_id = m.id
                 AND se.labels = CASE WHEN k.labels = '' THEN '{}'::jsonb ELSE k.labels::jsonb END
                """,
                ([k[0] for k in missing], [k[1] for k in missing], [k[2] for k in missing]),
            ).fetchall()
            found = {(r[0], r[1], r[2]): (r[3], r[4] == "counter") for r in rows}
        with self._lock:
            for key, (sid, is_counter) in found.items():
                self._series[key] = sid
                self._counter[sid] = is_counter

    def _load_last(self, conn: psycopg.Connection, sids: np.ndarray) -> None:
        unknown = [int(s) for s in np.unique(sids) if int(s) not in self._last]
        if not unknown:
            return
        rows = conn.execute(
            "SELECT u.id, extract(epoch FROM l.ts)::float8, l.value FROM unnest(%s::int[]) AS u(id)"
            " CROSS JOIN LATERAL (SELECT ts, value FROM samples WHERE series_id = u.id ORDER BY ts DESC LIMIT 1) l",
            (unknown,),
        ).fetchall()
        with self._lock:
            for sid, ts, value in rows:
                self._last[sid] = (ts, value)

    # -- writing ------------------------------------------------------------------------------
    def write_samples(self, conn: psycopg.Connection, cols: SampleColumns) -> Written:
        """Write inside the caller's transaction; pass the result to :meth:`committed` after commit."""
        n = len(cols)
        if n == 0:
            return Written(0, None)
        lk = [_labels_key(x) if x else "" for x in cols.labels]
        keys = list(zip(cols.source, cols.metric, lk, strict=True))
        self._resolve(conn, keys)
        series = self._series
        sids = np.fromiter((series[k] for k in keys), dtype=np.int64, count=n)
        counter_of = self._counter
        is_counter = np.fromiter((counter_of[s] for s in sids.tolist()), dtype=bool, count=n)
        rate = np.full(n, np.nan)
        if is_counter.any():
            idx = np.flatnonzero(is_counter)
            csid = sids[idx]
            self._load_last(conn, csid)
            last = self._last
            nan2 = (np.nan, np.nan)
            lt = np.fromiter((last.get(s, nan2)[0] for s in csid.tolist()), dtype=np.float64, count=len(idx))
            lv = np.fromiter((last.get(s, nan2)[1] for s in csid.tolist()), dtype=np.float64, count=len(idx))
            disc = None if cols.discontinuity is None else cols.discontinuity[idx]
            order, r = series_rates(csid, cols.ts[idx], cols.value[idx], lt, lv, disc)
            rate[idx[order]] = r
            pending = (csid[order], cols.ts[idx][order], cols.value[idx][order])
        else:
            pending = None
        payload = samples_copy_payload(cols.ts, sids, cols.value, rate)
        copy_sql = "COPY samples (ts, series_id, value, rate) FROM STDIN (FORMAT BINARY)"
        with conn.cursor() as cur, cur.copy(copy_sql) as cp:
            cp.write(payload)
        return Written(n, pending)

    def committed(self, written: Written) -> None:
        """Remember each series' newest point, once the batch is durable."""
        if written.last is None:
            return
        sids, ts, values = written.last
        # The arrays are sorted by (series, ts): the last row of each series is its newest point.
        last_of = np.ones(len(sids), dtype=bool)
        last_of[:-1] = sids[1:] != sids[:-1]
        with self._lock:
            cache = self._last
            for sid, t, v in zip(sids[last_of].tolist(), ts[last_of].tolist(), values[last_of].tolist(),
                                 strict=True):
                old = cache.get(sid)
                if old is None or t >= old[0]:
                    cache[sid] = (t, v)


def claim_batch(conn: psycopg.Connection, *, batch_id: str | None, kind: str, accepted: int) -> int | None:
    """Record a batch id in the current transaction; returns the earlier count when already seen."""
    if batch_id is None:
        return None
    row = conn.execute(
        "INSERT INTO ingest_batches (batch_id, kind, accepted) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
        (batch_id, kind, accepted),
    ).fetchone()
    if row is not None:
        return None
    prev = conn.execute("SELECT accepted FROM ingest_batches WHERE batch_id = %s", (batch_id,)).fetchone()
    return int(prev[0]) if prev else 0


def write_steps(conn: psycopg.Connection, *, job: str, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    starts = iso_utc(np.array([r[2] for r in rows]))
    ends = iso_utc(np.array([r[3] for r in rows]))
    with conn.cursor() as cur, cur.copy(
        "COPY steps (job, rank, step, start_ts, end_ts, duration_s, phases) FROM STDIN"
    ) as cp:
        for (rank, step, start, end, phases), s, e in zip(rows, starts, ends, strict=True):
            cp.write_row((job, rank, step, s, e, end - start, Jsonb(phases) if phases is not None else None))
    return len(rows)


def write_collectives(conn: psycopg.Connection, *, job: str, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    starts = iso_utc(np.array([r[5] for r in rows]))
    ends = iso_utc(np.array([r[6] for r in rows]))
    with conn.cursor() as cur, cur.copy(
        "COPY collectives (job, rank, step, seq, op, bytes, start_ts, end_ts, duration_s, group_name, group_size)"
        " FROM STDIN"
    ) as cp:
        for (rank, step, seq, op, nbytes, start, end, group, gsize), s, e in zip(rows, starts, ends, strict=True):
            cp.write_row((job, rank, step, seq, op, nbytes, s, e, end - start, group, gsize))
    return len(rows)


def write_events(conn: psycopg.Connection, *, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    starts = iso_utc(np.array([r[3] for r in rows]))
    ends = [None if r[4] is None else iso_utc(np.array([r[4]]))[0] for r in rows]
    with conn.cursor() as cur, cur.copy(
        "COPY events (kind, source, job, start_ts, end_ts, attrs) FROM STDIN"
    ) as cp:
        for (kind, source, job, _s, _e, attrs), s, e in zip(rows, starts, ends, strict=True):
            cp.write_row((kind, source, job, s, e, Jsonb(attrs)))
    return len(rows)
