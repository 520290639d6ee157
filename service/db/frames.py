"""Sample frames: the same samples as the `samples` table, also kept as one row per write and second.

Why (#15, 4,096 ranks): a slow step's window is ~500,000 samples of 125,000 series. Read as rows, the
database spent ~1 us a row (heap tuple, filter, array_agg, array_send per element): ~300 ms of the
~620 ms a slow step cost. A frame holds every sample one write (a batch) put in one second of time,
packed as fixed-size little-endian records of what the engine scores (a counter's rate, a gauge's
value); the window is then a few thousand rows whose payloads numpy reads with one frombuffer.
`samples` stays what every other reader (Grafana, history, probes) uses; frames are
written in the same transaction, so the two hold the same samples.

Counter increments: the rises of counters whose every rise is an event (INCREMENT_METRICS: a link that
went down), one row each, so the engine's look-back over the seconds before a step reads those few
rows, not ten seconds of every port's samples (~115 ms at 4,096 ranks).

A database upgraded with samples already in it records when frames began (`sample_frames_since`):
windows before that are read from `samples` (queries.outliers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fabricscope.service.db.copybin import HEADER, TRAILER

FRAME_US = 1_000_000  # one frame per write and second: a 2-10 s window reads a few thousand rows
# Records per frame at most: a frame of up to 8,000 bytes stays in its heap page (the table's
# toast_tuple_target, migration 0009) rather than going to TOAST as 2-KB chunks, each a row and an
# index entry of its own.
FRAME_MAX_RECORDS = 400
# Counters whose every rise is an event the engine looks back to (correlate.constants.AFTERMATH_S).
INCREMENT_METRICS = frozenset({"link_down_total"})
# One sample: series id, its time as stored (microseconds from 2000-01-01, like `samples.ts`), and its
# reading: the rate of a counter, the value of a gauge (NaN: NULL), the one number the window scores.
# 20 bytes, where value and rate both took 28: the writer's cost of frames is their bytes.
RECORD = np.dtype([("sid", "<i4"), ("ts", "<i8"), ("x", "<f8")])

FRAMES_COPY = "COPY sample_frames (bucket, n, payload) FROM STDIN (FORMAT BINARY)"
INCREMENTS_COPY = "COPY counter_increments (series_id, ts, rate) FROM STDIN (FORMAT BINARY)"
_FRAME_ROW = [("n", ">i2"), ("l_bucket", ">i4"), ("bucket", ">i8"), ("l_count", ">i4"), ("count", ">i4"),
              ("l_payload", ">i4")]
_INCREMENT_ROW = np.dtype([("n", ">i2"), ("l_sid", ">i4"), ("sid", ">i4"), ("l_ts", ">i4"), ("ts", ">i8"),
                           ("l_rate", ">i4"), ("rate", ">f8")])


def frames_copy_payload(ts_us: npt.NDArray[np.int64], sid: npt.NDArray[np.int64], x: npt.NDArray[np.float64],
                        group: npt.NDArray[np.int64] | None = None) -> bytes:
    """Binary COPY payload for ``COPY sample_frames (bucket, n, payload)``: one row per second the
    samples fall in (bucket: that second's start, as a stored timestamp) and per `group` (a bulk load's
    stand-in for the writes it replaces; default one), records in their given order."""
    if not len(ts_us):
        return HEADER + TRAILER
    b = ts_us // FRAME_US
    rec = np.empty(len(ts_us), RECORD)
    if group is None and (b[1:] >= b[:-1]).all():  # a write in time order, as collectors send: as it is
        rec["sid"], rec["ts"], rec["x"] = sid, ts_us, x
        cut = np.r_[True, b[1:] != b[:-1]]
    else:
        g = np.zeros(len(ts_us), np.int64) if group is None else group
        order = np.lexsort((b, g))
        rec["sid"], rec["ts"], rec["x"] = sid[order], ts_us[order], x[order]
        b, g = b[order], g[order]
        cut = np.r_[True, (b[1:] != b[:-1]) | (g[1:] != g[:-1])]
    run = np.cumsum(cut) - 1  # each (group, second) run, cut into frames of FRAME_MAX_RECORDS
    first = np.flatnonzero(cut)
    cut |= (np.arange(len(b)) - first[run]) % FRAME_MAX_RECORDS == 0
    starts = np.flatnonzero(cut)
    ends = np.r_[starts[1:], len(b)]
    parts = [HEADER]
    head = np.zeros(1, _FRAME_ROW)
    head["n"], head["l_bucket"], head["l_count"] = 3, 8, 4
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        head["bucket"], head["count"] = b[s] * FRAME_US, e - s
        head["l_payload"] = (e - s) * RECORD.itemsize
        parts += [head.tobytes(), rec[s:e].tobytes()]
    parts.append(TRAILER)
    return b"".join(parts)


def increments_copy_payload(ts_us: npt.NDArray[np.int64], sid: npt.NDArray[np.int64],
                            rate: npt.NDArray[np.float64], is_increment: npt.NDArray[np.bool_]) -> bytes | None:
    """Binary COPY payload for ``COPY counter_increments (series_id, ts, rate)`` of the samples of
    increment series whose rate is above zero (None: there are none)."""
    with np.errstate(invalid="ignore"):
        pick = np.flatnonzero(is_increment & (rate > 0))
    if not len(pick):
        return None
    rows = np.empty(len(pick), _INCREMENT_ROW)
    rows["n"], rows["l_sid"], rows["l_ts"], rows["l_rate"] = 3, 4, 8, 8
    rows["sid"], rows["ts"], rows["rate"] = sid[pick], ts_us[pick], rate[pick]
    return b"".join((HEADER, rows.tobytes(), TRAILER))


def write_frames(cur: Any, ts_us: npt.NDArray[np.int64], sid: npt.NDArray[np.int64], value: npt.NDArray[np.float64],
                 rate: npt.NDArray[np.float64], is_counter: npt.NDArray[np.bool_],
                 is_increment: npt.NDArray[np.bool_], group: npt.NDArray[np.int64] | None = None) -> None:
    """The frames and counter increments of samples just written to `samples` (same transaction);
    `group`: as frames_copy_payload's."""
    with cur.copy(FRAMES_COPY) as cp:
        cp.write(frames_copy_payload(ts_us, sid, np.where(is_counter, rate, value), group))
    inc = increments_copy_payload(ts_us, sid, rate, is_increment)
    if inc is not None:
        with cur.copy(INCREMENTS_COPY) as cp:
            cp.write(inc)


def decode(payloads: list[bytes]) -> np.ndarray:
    """The records of frames' payloads, in order (a RECORD array)."""
    return np.frombuffer(b"".join(payloads), RECORD)
