"""Data access for stored time series (keyword-only functions)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row


def list_sources(conn: psycopg.Connection, *, device: str | None) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute(
        "SELECT s.name AS source, s.device, s.interface, array_agg(DISTINCT m.name ORDER BY m.name) AS metrics"
        " FROM sources s LEFT JOIN series se ON se.source_id = s.id LEFT JOIN metrics m ON m.id = se.metric_id"
        " WHERE %(d)s::text IS NULL OR s.device = %(d)s GROUP BY s.id ORDER BY s.name",
        {"d": device},
    ).fetchall()


def series_of(conn: psycopg.Connection, *, source: str, metric: str) -> list[tuple[int, dict[str, str]]] | None:
    """Series ids (with labels) of a source's metric; None when the source itself is unknown."""
    if conn.execute("SELECT 1 FROM sources WHERE name = %s", (source,)).fetchone() is None:
        return None
    rows = conn.execute(
        "SELECT se.id, se.labels FROM series se JOIN sources s ON s.id = se.source_id"
        " JOIN metrics m ON m.id = se.metric_id WHERE s.name = %s AND m.name = %s ORDER BY se.labels::text",
        (source, metric),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def points(conn: psycopg.Connection, *, series_id: int, start: datetime, end: datetime, step: float | None,
           limit: int) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    if step is None:
        return cur.execute(
            "SELECT ts, value, rate FROM samples WHERE series_id = %s AND ts >= %s AND ts <= %s ORDER BY ts LIMIT %s",
            (series_id, start, end, limit),
        ).fetchall()
    # date_bin runs on plain PostgreSQL and TimescaleDB alike; rate per bucket = mean of per-sample rates.
    return cur.execute(
        "SELECT date_bin(%s, ts, TIMESTAMPTZ '2000-01-01') AS ts, avg(value) AS value, avg(rate) AS rate"
        " FROM samples WHERE series_id = %s AND ts >= %s AND ts <= %s GROUP BY 1 ORDER BY 1 LIMIT %s",
        (timedelta(seconds=step), series_id, start, end, limit),
    ).fetchall()


def count_series(conn: psycopg.Connection, *, source: str, metric: str) -> int | None:
    """How many series a source's metric has (what a read of it costs); None when the source is unknown."""
    row = conn.execute(
        "SELECT (SELECT id FROM sources WHERE name = %(s)s),"
        " (SELECT count(*) FROM series se JOIN sources s ON s.id = se.source_id JOIN metrics m ON m.id = se.metric_id"
        "  WHERE s.name = %(s)s AND m.name = %(m)s)", {"s": source, "m": metric}).fetchone()
    return None if row is None or row[0] is None else int(row[1])


def points_of_many(conn: psycopg.Connection, *, series_ids: list[int], start: datetime, end: datetime,
                   step: float | None, limit: int) -> dict[int, list[tuple[datetime, float, float | None]]]:
    """What :func:`points` answers for each series, in one query for all of them: ``limit`` rows per series
    (or buckets of ``step`` s), by time. A read over thousands of series spends its time in the database,
    not in a round trip per series."""
    if step is None:
        rows = conn.execute(
            "SELECT series_id, ts, value, rate FROM (SELECT series_id, ts, value, rate, row_number() OVER"
            " (PARTITION BY series_id ORDER BY ts) AS n FROM samples WHERE series_id = ANY(%s) AND ts >= %s"
            " AND ts <= %s) x WHERE n <= %s ORDER BY series_id, ts", (series_ids, start, end, limit)).fetchall()
    else:
        rows = conn.execute(
            "SELECT series_id, ts, value, rate FROM (SELECT series_id, ts, value, rate, row_number() OVER"
            " (PARTITION BY series_id ORDER BY ts) AS n FROM (SELECT series_id, date_bin(%s, ts,"
            " TIMESTAMPTZ '2000-01-01') AS ts, avg(value) AS value, avg(rate) AS rate FROM samples"
            " WHERE series_id = ANY(%s) AND ts >= %s AND ts <= %s GROUP BY 1, 2) b) x WHERE n <= %s"
            " ORDER BY series_id, ts", (timedelta(seconds=step), series_ids, start, end, limit)).fetchall()
    out: dict[int, list[tuple[datetime, float, float | None]]] = {sid: [] for sid in series_ids}
    for sid, ts, value, rate in rows:
        out[sid].append((ts, value, rate))
    return out
