"""The direct writer: resolves series ids, computes rates, and COPYs batches in one transaction.

Used by the HTTP ingest routes, by ``service.ingest.db_transport`` (agents writing straight to the
database) and by the NATS writers. Caches (names → ids, last point per series) are per process; a cache miss costs one
query per batch, never one per row.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from fabricscope.core.rates import series_rates
from fabricscope.service.db.columns import SampleColumns
from fabricscope.service.db.copybin import iso_utc, samples_copy_payload, stored_us
from fabricscope.service.db.frames import INCREMENT_METRICS, SCORED_METRICS, write_frames

SeriesKey = tuple[str, str, str]  # (source, metric, labels as sorted JSON or "")


@dataclass(frozen=True, slots=True)
class Written:
    count: int
    last: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # newest points, sorted by (series, ts)
    # Series created in this transaction: cached only once it commits (a rollback removes them).
    new_series: dict[SeriesKey, int] | None = None


def split_source(name: str) -> tuple[str, str | None]:
    device, sep, interface = name.partition(":")
    return device, (interface if sep else None)


class SampleWriter:
    """Per-process caches: series key → id (dict), and per-series state in numpy arrays indexed by
    the (dense, serial) series id, so a batch needs no per-row Python beyond the key lookup."""

    def __init__(self) -> None:
        self._series: dict[SeriesKey, int] = {}
        self._lock = threading.Lock()
        self._alloc(1024)

    def _alloc(self, size: int) -> None:
        self._is_counter = np.zeros(size, dtype=bool)
        self._is_increment = np.zeros(size, dtype=bool)  # frames.INCREMENT_METRICS
        self._is_scored = np.zeros(size, dtype=bool)  # frames.SCORED_METRICS
        self._loaded = np.zeros(size, dtype=bool)  # last point known (from the DB or a write)
        self._last_ts = np.full(size, np.nan)
        self._last_val = np.full(size, np.nan)

    def _grow(self, max_id: int) -> None:
        if max_id < len(self._is_counter):
            return
        old = (self._is_counter, self._is_increment, self._is_scored, self._loaded, self._last_ts, self._last_val)
        self._alloc(max(2 * len(old[0]), max_id + 1))
        n = len(old[0])
        (self._is_counter[:n], self._is_increment[:n], self._is_scored[:n], self._loaded[:n], self._last_ts[:n],
         self._last_val[:n]) = old

    def reset_caches(self) -> None:
        with self._lock:
            self._series.clear()
            self._alloc(1024)

    # -- dictionaries -------------------------------------------------------------------------
    def _resolve(self, conn: psycopg.Connection, keys: list[SeriesKey]) -> dict[SeriesKey, int]:
        """Ids of the keys not cached yet (creating their series in the caller's transaction)."""
        missing = sorted({k for k in keys if k not in self._series})
        if not missing:
            return {}
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
        cols = ([k[0] for k in missing], [k[1] for k in missing], [k[2] for k in missing])
        conn.execute(
            """
            INSERT INTO series (source_id, metric_id, labels)
            SELECT s.id, m.id, CASE WHEN k.labels = '' THEN '{}'::jsonb ELSE k.labels::jsonb END
            FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(source, metric, labels)
            JOIN sources s ON s.name = k.source JOIN metrics m ON m.name = k.metric
            ON CONFLICT (source_id, metric_id, labels) DO NOTHING
            """,
            cols,
        )
        rows = conn.execute(
            """
            WITH k AS MATERIALIZED (
              SELECT k.source, k.metric, k.labels, s.id AS source_id, m.id AS metric_id, m.kind,
                     CASE WHEN k.labels = '' THEN '{}'::jsonb ELSE k.labels::jsonb END AS lj
              FROM unnest(%s::text[], %s::text[], %s::text[]) AS k(source, metric, labels)
              JOIN sources s ON s.name = k.source JOIN metrics m ON m.name = k.metric
            )
            SELECT k.source, k.metric, k.labels, se.id, k.kind
            FROM k JOIN series se ON se.source_id = k.source_id AND se.metric_id = k.metric_id AND se.labels = k.lj
            """,
            cols,
        ).fetchall()
        found: dict[SeriesKey, int] = {}
        with self._lock:
            self._grow(max(r[3] for r in rows))
            for source, metric, labels, sid, kind in rows:
                found[(source, metric, labels)] = sid
                # Safe before commit: a series id is never reused, and its metric kind never changes.
                self._is_counter[sid] = kind == "counter"
                self._is_increment[sid] = kind == "counter" and metric in INCREMENT_METRICS
                self._is_scored[sid] = metric in SCORED_METRICS
        return found

    def _load_last(self, conn: psycopg.Connection, sids: np.ndarray) -> None:
        unknown = sids[~self._loaded[sids]]
        if not len(unknown):
            return
        unknown = np.unique(unknown)
        rows = conn.execute(
            "SELECT u.id, extract(epoch FROM l.ts)::float8, l.value FROM unnest(%s::int[]) AS u(id)"
            " CROSS JOIN LATERAL (SELECT ts, value FROM samples WHERE series_id = u.id ORDER BY ts DESC LIMIT 1) l",
            (unknown.tolist(),),
        ).fetchall()
        with self._lock:
            for sid, ts, value in rows:
                self._last_ts[sid] = ts
                self._last_val[sid] = value
            self._loaded[unknown] = True

    # -- writing ------------------------------------------------------------------------------
    def write_samples(self, conn: psycopg.Connection, cols: SampleColumns) -> Written:
        """Write inside the caller's transaction; pass the result to :meth:`committed` after commit."""
        n = len(cols)
        if n == 0:
            return Written(0, None)
        series = self._series
        keys = zip(cols.source, cols.metric, cols.label_keys, strict=True)
        sids = np.fromiter(map(series.get, keys, repeat(-1)), dtype=np.int64, count=n)
        new: dict[SeriesKey, int] = {}
        if (sids < 0).any():
            all_keys = list(zip(cols.source, cols.metric, cols.label_keys, strict=True))
            new = self._resolve(conn, all_keys)
            get = series.get
            sids = np.fromiter((get(k) or new[k] for k in all_keys), dtype=np.int64, count=n)
        is_counter = self._is_counter[sids]
        rate = np.full(n, np.nan)
        pending = None
        if is_counter.any():
            self._load_last(conn, sids)
            idx = np.flatnonzero(is_counter)
            csid = sids[idx]
            disc = None if cols.discontinuity is None else cols.discontinuity[idx]
            order, r = series_rates(csid, cols.ts[idx], cols.value[idx], self._last_ts[csid], self._last_val[csid],
                                    disc)
            rate[idx[order]] = r
            pending = (csid[order], cols.ts[idx][order], cols.value[idx][order])
        payload = samples_copy_payload(cols.ts, sids, cols.value, rate)
        copy_sql = "COPY samples (ts, series_id, value, rate) FROM STDIN (FORMAT BINARY)"
        with conn.cursor() as cur:
            with cur.copy(copy_sql) as cp:
                cp.write(payload)
            write_frames(cur, stored_us(cols.ts), sids, cols.value, rate, is_counter, self._is_increment[sids],
                         is_scored=self._is_scored[sids])
        return Written(n, pending, new or None)

    def committed(self, written: Written) -> None:
        """Remember new series and each series' newest point, once the batch is durable."""
        if written.new_series:
            with self._lock:
                self._series.update(written.new_series)
        if written.last is None:
            return
        sids, ts, values = written.last
        # The arrays are sorted by (series, ts): the last row of each series is its newest point.
        last_of = np.ones(len(sids), dtype=bool)
        last_of[:-1] = sids[1:] != sids[:-1]
        s, t, v = sids[last_of], ts[last_of], values[last_of]
        with self._lock:
            newer = ~(self._last_ts[s] > t)  # NaN (unknown) compares False: take the new point
            self._last_ts[s[newer]] = t[newer]
            self._last_val[s[newer]] = v[newer]
            self._loaded[s] = True


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


def mark_rollup(conn: psycopg.Connection, *, job: str, starts: np.ndarray) -> None:
    """Queue the hours these rows fall in for the trends rollup (service/trends/rollup.py), in the
    batch's transaction: a batch that commits is rolled, late ones (spool replays, imports) too."""
    hours = np.unique(np.floor(starts / 3600.0)).astype(np.int64) * 3600
    conn.execute("INSERT INTO rollup_pending (job, hour) SELECT %s, to_timestamp(h) FROM unnest(%s::bigint[]) h",
                 (job, hours.tolist()))


# The phases the engine reads of every rank, also kept as columns (migration 0011: JSON lookups cost
# most of a 4,096-rank step's rank rows); None where the step has no such phase.
STEP_PHASE_COLUMNS = {"data": "data_s", "forward_backward": "forward_backward_s", "optimizer": "optimizer_s",
                      "checkpoint": "checkpoint_s"}


def phase_values(phases: dict[str, Any] | None) -> tuple[float | None, ...]:
    """The STEP_PHASE_COLUMNS values of one step's `phases`, in that order."""
    if not phases:
        return (None,) * len(STEP_PHASE_COLUMNS)
    return tuple(None if (v := phases.get(k)) is None else float(v) for k in STEP_PHASE_COLUMNS)


def write_steps(conn: psycopg.Connection, *, job: str, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    starts = iso_utc(np.array([r[2] for r in rows]))
    ends = iso_utc(np.array([r[3] for r in rows]))
    with conn.cursor() as cur, cur.copy(
        f"COPY steps (job, rank, step, start_ts, end_ts, duration_s, phases, {', '.join(STEP_PHASE_COLUMNS.values())})"
        " FROM STDIN"
    ) as cp:
        for (rank, step, start, end, phases), s, e in zip(rows, starts, ends, strict=True):
            cp.write_row((job, rank, step, s, e, end - start, Jsonb(phases) if phases is not None else None,
                          *phase_values(phases)))
    mark_rollup(conn, job=job, starts=np.array([r[2] for r in rows], dtype=float))
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
    mark_rollup(conn, job=job, starts=np.array([r[5] for r in rows], dtype=float))
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
