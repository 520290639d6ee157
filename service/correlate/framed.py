"""A step's window read from sample frames (service/db/frames.py) rather than from sample rows.

The frames hold the same samples as `samples`; this reads the seconds the window and the scan after
it touch, and keeps in numpy what WINDOW_SQL's WHERE kept (the job's scoring set, times in
(ws, we + scan] compared as stored microseconds, as to_timestamp rounds them). At 4,096 ranks that is
a few thousand rows of up to 400 records, not ~730,000 rows filtered to ~370,000.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fabricscope.service.correlate import window as win
from fabricscope.service.db import frames

# The seconds whose frames can hold a sample in (ws, hi]: a frame's bucket is its second's start.
# Not the frames of the metrics no window scores (frames.PART_OTHER; the partial index
# sample_frames_scored has the same predicate, which is how the planner knows to use it).
FRAMES_SQL = f"""
SELECT payload FROM sample_frames
WHERE bucket > to_timestamp(%(ws)s) - interval '1 second' AND bucket <= to_timestamp(%(hi)s)
  AND part <> {frames.PART_OTHER}
ORDER BY bucket
"""
SINCE_SQL = "SELECT date_part('epoch', since) FROM sample_frames_since"
# The rises of increment counters (frames.INCREMENT_METRICS) in the seconds before the window:
# LOOKBACK_SQL's maximum rate without reading every sample of those seconds. A series whose counter
# did not rise has no row here (LOOKBACK_SQL gave it 0, which no score counts).
INCREMENTS_SQL = """
SELECT series_id, max(rate) AS mx FROM counter_increments
WHERE ts > to_timestamp(%(ws)s - %(lb)s) AND ts <= to_timestamp(%(ws)s) AND series_id = ANY(%(lb_ids)s::int[])
GROUP BY series_id
"""


def frames_cover(conn: Any, ws: float) -> bool:
    """Whether every sample after `ws` is also in a frame: frames began before it (a database that
    held samples when migration 0009 ran has frames only from then on)."""
    row = conn.execute(SINCE_SQL).fetchone()
    return row is not None and row[0] is not None and (row[0] == -math.inf or row[0] < ws)


def window_samples(conn: Any, sc: win.Scoring, *, ws: float, hi: float, we: float) -> tuple[win.Samples, np.ndarray]:
    """The scoring set's samples in (ws, hi] as win.first_after leaves them (`we`: the window's end),
    and the series with a sample after `we`."""
    with conn.cursor(binary=True) as cur:
        payloads = [r[0] for r in cur.execute(FRAMES_SQL, {"ws": ws, "hi": hi}, prepare=False).fetchall()]
    rec = frames.decode(payloads)
    ts = rec["ts"]
    keep = np.flatnonzero((ts > win.pg_us(ws)) & (ts <= win.pg_us(hi)) & sc.has(rec["sid"]))
    ts, x = ts[keep], rec["x"][keep]
    # A frame keeps the reading the window scores (window_values takes a gauge's value, a counter's
    # rate): both fields carry it.
    s = win.Samples(rec["sid"][keep].astype(np.int64), win.epoch_s(ts), x, x)
    return win.first_after(s, ts > win.pg_us(we))


def increments(conn: Any, *, ws: float, lb: float, ids: str) -> list[tuple[int, float]]:
    """(series id, highest rate) of the increment series `ids` (an array literal) that rose in the
    `lb` seconds before ws."""
    return [
        (int(i), float(m))
        for i, m in conn.execute(INCREMENTS_SQL, {"ws": ws, "lb": lb, "lb_ids": ids}, prepare=False).fetchall()
    ]
