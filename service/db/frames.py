"""Sample frames: the same samples as the `samples` table, also kept as one row per write and second.

Why (#15, 4,096 ranks): a slow step's window is ~500,000 samples of 125,000 series. Read as rows, the
database spent ~1 us a row (heap tuple, filter, array_agg, array_send per element): ~300 ms of the
~620 ms a slow step cost. A frame holds every sample one write (a batch) put in one second of time,
packed as fixed-size little-endian records of what the engine scores (a counter's rate, a gauge's
value); the window is then a few thousand rows whose payloads numpy reads with one frombuffer.
`samples` stays what every other reader (Grafana, history, probes) uses; frames are
written in the same transaction, so the two hold the same samples.

Parts (#15, migration 0010): a write's samples of the metrics the engine scores (SCORED_METRICS) and
those of the rest go in frames of their own, so the window reads only the frames it scores (a partial
index over the scored part): at 4,096 ranks about half of the records the window's seconds hold.

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
# The metrics the engine scores in a step's window (correlate.localize.FLOORS; a test keeps the two
# the same). Their samples go in frames of their own (PART_SCORED), the rest (byte counters, GPU and
# PCIe state: read by the device probes from `samples`) in PART_OTHER, so a window reads the frames of
# its scored part only: at 4,096 ranks ~510,000 records of ~950,000.
SCORED_METRICS = frozenset({
    "rx_out_of_buffer_total", "tx_pause_frames_total", "rx_pause_frames_total", "ecn_marked_packets_total",
    "cnp_handled_total", "cnp_sent_total", "rx_discards_total", "tx_discards_total", "rx_fcs_errors_total",
    "symbol_errors_total", "rx_errors_total", "link_down_total", "rdma_retransmits_total", "rdma_timeouts_total",
    "queue_occupancy_bytes", "port_xmit_wait_total", "read_latency_seconds", "write_latency_seconds",
    "queue_dropped_packets_total", "queue_watermark_bytes", "pfc_deadlock_total", "link_error_recovery_total",
    "tcp_retransmitted_segments_total", "tcp_timeouts_total"})
# sample_frames.part: frames written before parts existed hold every metric (PART_ALL, migration 0010)
PART_ALL, PART_SCORED, PART_OTHER = 0, 1, 2
# One sample: series id, its time as stored (microseconds from 2000-01-01, like `samples.ts`), and its
# reading: the rate of a counter, the value of a gauge (NaN: NULL), the one number the window scores.
# 20 bytes, where value and rate both took 28: the writer's cost of frames is their bytes.
RECORD = np.dtype([("sid", "<i4"), ("ts", "<i8"), ("x", "<f8")])

FRAMES_COPY = "COPY sample_frames (bucket, n, part, payload) FROM STDIN (FORMAT BINARY)"
INCREMENTS_COPY = "COPY counter_increments (series_id, ts, rate) FROM STDIN (FORMAT BINARY)"
_FRAME_ROW = [("n", ">i2"), ("l_bucket", ">i4"), ("bucket", ">i8"), ("l_count", ">i4"), ("count", ">i4"),
              ("l_part", ">i4"), ("part", ">i2"), ("l_payload", ">i4")]
_INCREMENT_ROW = np.dtype([("n", ">i2"), ("l_sid", ">i4"), ("sid", ">i4"), ("l_ts", ">i4"), ("ts", ">i8"),
                           ("l_rate", ">i4"), ("rate", ">f8")])


def frames_copy_payload(ts_us: npt.NDArray[np.int64], sid: npt.NDArray[np.int64], x: npt.NDArray[np.float64],
                        group: npt.NDArray[np.int64] | None = None,
                        part: npt.NDArray[np.int8] | None = None) -> bytes:
    """Binary COPY payload for FRAMES_COPY: one row per second the samples fall in (bucket: that
    second's start, as a stored timestamp), per `part` (default PART_ALL) and per `group` (a bulk
    load's stand-in for the writes it replaces; default one), records in their given order."""
    if not len(ts_us):
        return HEADER + TRAILER
    b = ts_us // FRAME_US
    p = np.zeros(len(ts_us), np.int8) if part is None else part
    rec = np.empty(len(ts_us), RECORD)
    if group is None and (b[1:] >= b[:-1]).all():  # a write in time order, as collectors send
        order = np.argsort(p, kind="stable")  # each part stays in time order
        g = p[order].astype(np.int64)
    else:
        g = (np.zeros(len(ts_us), np.int64) if group is None else group) * (PART_OTHER + 1) + p
        order = np.lexsort((b, g))
        g = g[order]
    rec["sid"], rec["ts"], rec["x"] = sid[order], ts_us[order], x[order]
    b, p = b[order], p[order]
    cut = np.r_[True, (b[1:] != b[:-1]) | (g[1:] != g[:-1])]
    run = np.cumsum(cut) - 1  # each (group, part, second) run, cut into frames of FRAME_MAX_RECORDS
    first = np.flatnonzero(cut)
    cut |= (np.arange(len(b)) - first[run]) % FRAME_MAX_RECORDS == 0
    starts = np.flatnonzero(cut)
    ends = np.r_[starts[1:], len(b)]
    parts = [HEADER]
    head = np.zeros(1, _FRAME_ROW)
    head["n"], head["l_bucket"], head["l_count"], head["l_part"] = 4, 8, 4, 2
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        head["bucket"], head["count"], head["part"] = b[s] * FRAME_US, e - s, p[s]
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
                 is_increment: npt.NDArray[np.bool_], group: npt.NDArray[np.int64] | None = None,
                 is_scored: npt.NDArray[np.bool_] | None = None) -> None:
    """The frames and counter increments of samples just written to `samples` (same transaction);
    `group`: as frames_copy_payload's; `is_scored`: whether each sample's metric is in SCORED_METRICS
    (None: one part, PART_ALL)."""
    part = None if is_scored is None else np.where(is_scored, PART_SCORED, PART_OTHER).astype(np.int8)
    with cur.copy(FRAMES_COPY) as cp:
        cp.write(frames_copy_payload(ts_us, sid, np.where(is_counter, rate, value), group, part))
    inc = increments_copy_payload(ts_us, sid, rate, is_increment)
    if inc is not None:
        with cur.copy(INCREMENTS_COPY) as cp:
            cp.write(inc)


def decode(payloads: list[bytes]) -> np.ndarray:
    """The records of frames' payloads, in order (a RECORD array)."""
    return np.frombuffer(b"".join(payloads), RECORD)
