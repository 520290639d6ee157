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
