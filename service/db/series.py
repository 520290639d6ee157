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


# A point as the API writes it, built by the database: {"ts": RFC 3339 in the session's time zone, as
# Python's isoformat (trailing zeros of the fraction left off), "value", "rate"}.
_POINT_JSON = "json_build_object('ts', ts, 'value', value, 'rate', rate)"


def points_json_of_many(conn: psycopg.Connection, *, series_ids: list[int], start: datetime, end: datetime,
                        step: float | None, limit: int) -> dict[int, str]:
    """What :func:`points` answers for each series, in one query for all of them, each series' points as
    a JSON array the database encodes (a series with no points is absent). A read over thousands of series
    then costs the service a string per series, not a tuple, a datetime and a dict per point: 100,000
    points held the interpreter (and every request behind it) for a second per read (#46's wide reads)."""
    inner = ("SELECT series_id, ts, value, rate FROM samples WHERE series_id = ANY(%(ids)s) AND ts >= %(start)s"
             " AND ts <= %(end)s") if step is None else (
             "SELECT series_id, date_bin(%(step)s, ts, TIMESTAMPTZ '2000-01-01') AS ts, avg(value) AS value,"
             " avg(rate) AS rate FROM samples WHERE series_id = ANY(%(ids)s) AND ts >= %(start)s AND ts <= %(end)s"
             " GROUP BY 1, 2")
    rows = conn.execute(
        f"SELECT series_id, json_agg({_POINT_JSON} ORDER BY ts)::text FROM (SELECT series_id, ts, value, rate,"
        f" row_number() OVER (PARTITION BY series_id ORDER BY ts) AS n FROM ({inner}) b) x WHERE n <= %(limit)s"
        " GROUP BY series_id",
        {"ids": series_ids, "start": start, "end": end, "limit": limit,
         "step": timedelta(seconds=step) if step is not None else None}).fetchall()
    return {sid: text for sid, text in rows}
