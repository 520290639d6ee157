"""Deterministic sample batches and an exact row-by-row comparison with the database.

Every expected row is (ts in µs, source, metric, labels, value); the database side reads the same
tuple from ``sample_view``. Comparing the two multisets finds any lost row and any duplicate; the
checksum (sha256 over the sorted rows) is what the tests report.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from typing import Any

import orjson
import psycopg

METRICS = ("rx_bytes_total", "tx_bytes_total", "rx_pause_frames_total", "queue_occupancy_bytes")
Row = tuple[int, str, str, str, float]


def sample_items(n: int, *, prefix: str, n_series: int = 200, t0: float | None = None) -> list[dict[str, Any]]:
    """n samples over n_series series, one point per series per second, counters increasing."""
    t0 = float(int(t0 if t0 is not None else time.time() - 3600))
    out = []
    for i in range(n):
        s, step = i % n_series, i // n_series
        metric = METRICS[s % len(METRICS)]
        item: dict[str, Any] = {"ts": t0 + step, "source": f"{prefix}{s // 16}:Ethernet{s % 16}",
                                "metric": metric, "value": float(step * 1000 + (s * 7919) % 997)}
        if metric == "rx_pause_frames_total":
            item["labels"] = {"priority": "3"}
        out.append(item)
    return out


def _labels(lab: dict[str, str] | None) -> str:
    return orjson.dumps(lab or {}, option=orjson.OPT_SORT_KEYS).decode()


def expected(items: list[dict[str, Any]]) -> Counter[Row]:
    return Counter((round(it["ts"] * 1e6), it["source"], it["metric"], _labels(it.get("labels")), float(it["value"]))
                   for it in items)


def in_db(conn: psycopg.Connection, prefix: str) -> Counter[Row]:
    rows = conn.execute(
        "SELECT (extract(epoch FROM ts) * 1e6)::bigint, source, metric, labels, value FROM sample_view"
        " WHERE source LIKE %s", (prefix + "%",)).fetchall()
    return Counter((int(t), s, m, _labels(lab), float(v)) for t, s, m, lab, v in rows)


def count(conn: psycopg.Connection, prefix: str) -> int:
    row = conn.execute("SELECT count(*) FROM sample_view WHERE source LIKE %s", (prefix + "%",)).fetchone()
    return int(row[0]) if row else 0


def checksum(rows: Counter[Row]) -> str:
    h = hashlib.sha256()
    for r in sorted(rows.elements()):
        h.update(repr(r).encode())
    return h.hexdigest()[:16]


def wait_count(url: str, prefix: str, n: int, timeout_s: float) -> int:
    """Poll until n rows are visible (or the time is up); returns the last count seen."""
    deadline = time.monotonic() + timeout_s
    seen = -1
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                seen = count(conn, prefix)
        except psycopg.OperationalError:
            seen = -1
        if seen >= n:
            return seen
        time.sleep(0.3)
    return seen


def assert_exact(url: str, prefix: str, items: list[dict[str, Any]]) -> str:
    want = expected(items)
    with psycopg.connect(url) as conn:
        got = in_db(conn, prefix)
        orphans = conn.execute("SELECT count(*) FROM samples s WHERE NOT EXISTS"
                               " (SELECT 1 FROM series se WHERE se.id = s.series_id)").fetchone()
    lost = want - got
    extra = got - want
    assert not lost and not extra, (f"{sum(lost.values())} rows lost (e.g. {list(lost)[:2]}), "
                                    f"{sum(extra.values())} duplicated/unexpected (e.g. {list(extra)[:2]})")
    assert orphans is not None and orphans[0] == 0, f"{orphans} sample rows point at no series"
    assert checksum(got) == checksum(want)
    return checksum(got)
