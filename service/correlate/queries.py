"""All SQL of the correlation engine: the database does the windowing and per-step aggregation, Python
gets small frames. Every function takes a psycopg 3 connection and keyword-only arguments."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate import framed
from fabricscope.service.correlate import window as win
from fabricscope.service.correlate.constants import (
    AFTERMATH_S,
    BITMAP_MAX_SPAN,
    MAX_OUTLIERS,
    MAX_SAMPLE_GAP_S,
    NEXT_SCAN_S,
    PEER_MIN_Z,
)
from fabricscope.service.correlate.edges import edge_excess
from fabricscope.service.correlate.rules import ids as rule_ids  # `ids` names series ids here
from fabricscope.service.correlate.window import Scoring
from fabricscope.service.db.frames import INCREMENT_METRICS

# A step's pure transfer time (`transfer`), measured the same way in every step of a job. With every
# rank's records (FABRICSCOPE_COLLECTIVE_DETAIL=all): the sum over its collectives of the fastest
# rank's record, the transfer with no waiting. A job whose hook sends per-step summaries (bounded
# detail) has every rank's records only for some steps (slow, requested, a sampled rank's): there the
# minimum over ranks of a rank's summed collective time, from the summaries every rank sends for every
# step (the rank that waited least: the one the others waited for, or none), of the ranks that timed
# all of the step's collectives (one that lost a record would read low by its time). Mixing the two would set
# a healthy step with one rank's records (its waits included) against a slow one with all of them.
# `pending`: a bounded job's step whose ranks' summaries have not all arrived (no transfer yet).
SUMMARY_SQL = """
WITH st AS (
  SELECT step, count(*) AS n,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS dur,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM start_ts)::float8) AS start,
         max(coalesce(checkpoint_s, (phases->>'checkpoint')::float8, 0)) AS ckpt_max,
         percentile_cont(0.5) WITHIN GROUP (
           ORDER BY coalesce(checkpoint_s, (phases->>'checkpoint')::float8, 0)) AS ckpt_med,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY coalesce(data_s, (phases->>'data')::float8)) AS data
  FROM steps WHERE job = %(job)s AND step BETWEEN %(lo)s AND %(hi)s GROUP BY step
), tr AS (
  SELECT step, sum(mn) AS transfer FROM (
    SELECT step, seq, min(duration_s) AS mn FROM collectives
    WHERE job = %(job)s AND step BETWEEN %(lo)s AND %(hi)s AND op <> 'barrier' GROUP BY step, seq) x
  GROUP BY step
), sm AS (
  SELECT step, count(*) AS ranks, min(t) FILTER (WHERE c = top) AS transfer FROM (
    SELECT step, rank, sum(total_s) AS t, sum(count) AS c, max(sum(count)) OVER (PARTITION BY step) AS top
    FROM collective_summaries
    WHERE job = %(job)s AND step BETWEEN %(lo)s AND %(hi)s AND op <> 'barrier' GROUP BY step, rank) y
  GROUP BY step
), bounded AS (
  SELECT EXISTS (SELECT 1 FROM collective_summaries WHERE job = %(job)s) AS yes
)
SELECT st.step, st.n, st.dur, st.start, st.ckpt_max, st.ckpt_med,
       CASE WHEN NOT bounded.yes THEN tr.transfer WHEN sm.ranks >= st.n THEN sm.transfer END AS transfer, st.data,
       bounded.yes AND coalesce(sm.ranks, 0) < st.n AS pending
FROM st CROSS JOIN bounded LEFT JOIN tr USING (step) LEFT JOIN sm USING (step) ORDER BY st.step
"""

RANKS_SQL = """
SELECT rank, duration_s AS dur, coalesce(data_s, (phases->>'data')::float8) AS data,
       coalesce(forward_backward_s, (phases->>'forward_backward')::float8) AS fb,
       coalesce(optimizer_s, (phases->>'optimizer')::float8) AS opt,
       coalesce(checkpoint_s, (phases->>'checkpoint')::float8) AS ckpt
FROM steps WHERE job = %(job)s AND step = %(step)s
"""
PLACEMENT_COLS = ["host", "gpu", "nic"]

COLL_SQL = "SELECT rank, seq, duration_s FROM collectives WHERE job = %(job)s AND step = %(step)s"
# The same rows as three arrays (array_send, read with np.frombuffer): a step has a row per rank and
# collective (16,000 at 4,096 ranks), which as Python tuples and a frame built from them cost ~15 ms.
# seq may be NULL (an array cannot hold it): then, or with no rows, the rows are read as rows.
COLL_ARRAYS_SQL = """
SELECT count(*), count(seq), array_send(array_agg(rank)), array_send(array_agg(coalesce(seq, 0))),
       array_send(array_agg(duration_s))
FROM collectives WHERE job = %(job)s AND step = %(step)s"""

# Each rank's collective time in a step from the summaries its hook sends with bounded detail (every
# rank, every step; no rows: the job sends every record): the seconds and the collectives timed.
RANK_COMM_SQL = """
SELECT rank, sum(total_s) AS total, sum(count) AS n FROM collective_summaries
WHERE job = %(job)s AND step = %(step)s GROUP BY rank
"""

SERIES_SQL = """
SELECT se.id AS series_id, src.name AS source, m.name AS metric, m.kind, se.labels::text AS labels
FROM sources src
JOIN series se ON se.source_id = src.id
JOIN metrics m ON m.id = se.metric_id AND m.name = ANY(%(metrics)s)
WHERE src.name = ANY(%(sources)s)
"""

# The samples of the job's scoring set that describe the step's window (window.py has how they weigh):
# those in (ws, we] and the seconds just after it (NEXT_SCAN_S, where 1-2-s collectors have their next
# sample). One array per column, sent as the arrays' binary form: 500,000 rows at 4,096 ranks, which as
# rows (or as a COPY: one message each) cost more to receive than to read. Times go as they are stored
# (window.epoch_s and window.pg_us do in numpy what date_part and to_timestamp do, to the bit): a
# conversion or a comparison per row here cost ~10 % of the query.
WINDOW_COLUMNS = """
SELECT array_send(array_agg(series_id)), array_send(array_agg(ts)), array_send(array_agg(value)),
       array_send(array_agg(coalesce(rate, 'NaN')))
FROM samples WHERE ts > to_timestamp(%(ws)s) AND ts <= to_timestamp(%(we)s + %(scan)s) AND """
# An index range per series of the (series_id, ts) btree, which outliers() makes the planner take
# (BTREE_SETTINGS): given the ids, it preferred the window's range of the BRIN index on ts with
# the ids as a filter, which costs about as much on a summarized index (256 ranks: 14 against 28 ms),
# but a BRIN range that no VACUUM has summarized yet matches every window. Freshly written telemetry,
# what a running service attributes, is mostly in such ranges: the 256-rank bench job right after
# its load read all its 7,800 pages (1.1 M rows) for a 6-s window, 70-100 ms per step.
WINDOW_SQL = WINDOW_COLUMNS + "series_id = ANY(%(ids)s::int[])"
# Local to the scoring transaction (the look-back after the window is a range per series too).
BTREE_SETTINGS = "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
# Both paths. A plan this size costs far above jit_above_cost, and compiling it took longer (~0.8 s at
# 4,096 ranks) than running it, every step: a query planned each time gains nothing from JIT. No
# parallel workers: on 2 cores they save no time, their CPU is another process's (the BRIN range's
# parallel bitmap scan at 4,096 ranks ran two, unseen by the bench's CPU figure), and a Gather hands
# rows to array_agg in whatever order the workers finish.
SCORING_SETTINGS = "SELECT set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)"
# A job with most of the database's series (window.use_bitmap) reads the window's time range and keeps
# its series by one bit each: the hashed `= ANY` over 125,000 ids cost ~0.1 us a row, 90 of the 300 ms
# of this query at 4,096 ranks (a million rows in the range, half of them the job's); get_bit ~0.01.
WINDOW_BITS_SQL = (
    WINDOW_COLUMNS
    + """series_id BETWEEN %(lo)s::int AND %(hi)s::int
  AND get_bit(%(bits)s::varbit, series_id - %(lo)s::int) = 1"""
)

# One index probe per series of `need` (no sample in the scan after the window: a slower collector):
# its first sample further on, bounded by MAX_SAMPLE_GAP_S.
PROBES_SQL = """
SELECT u.series_id, date_part('epoch', x.ts) AS t, x.value, x.rate FROM unnest(%(need)s::int[]) AS u(series_id)
CROSS JOIN LATERAL (
  SELECT ts, value, rate FROM samples WHERE series_id = u.series_id AND ts > to_timestamp(%(we)s + %(scan)s)
    AND ts <= to_timestamp(%(we)s + %(gap)s) ORDER BY ts LIMIT 1) x
"""

# The highest value in the seconds before the window (`lb`) that a signal still explains, for the
# series of one (look-back, gauge) class (Scoring.lookback; one class today, link_down_total): one
# index scan over all of them, 50-60 ms at 4,096 ranks against 90 for a probe per series with its own
# look-back and kind.
LOOKBACK_SQL = """
SELECT series_id, max(CASE WHEN %(gauge)s THEN value ELSE rate END) AS mx FROM samples
WHERE series_id = ANY(%(lb_ids)s::int[]) AND ts > to_timestamp(%(ws)s - %(lb)s) AND ts <= to_timestamp(%(ws)s)
GROUP BY series_id HAVING max(CASE WHEN %(gauge)s THEN value ELSE rate END) IS NOT NULL
"""

# The samples (rate) of a few series from MAX_SAMPLE_GAP_S before a window to as long after it: the
# neighbours of its edge samples (without_edge_changes).
NEIGHBOURS_SQL = """
SELECT series_id, date_part('epoch', ts) AS t, rate FROM samples WHERE series_id = ANY(%(ids)s::int[])
  AND ts > to_timestamp(%(ws)s - %(gap)s) AND ts <= to_timestamp(%(we)s + %(gap)s) ORDER BY series_id, ts
"""

# The time of the sample before the window of each series of `ids` (one sample in the window and
# its probe: a collector slower than the window), bounded by MAX_SAMPLE_GAP_S: that sample's span
# is the series' interval (window.py).
PREVIOUS_SQL = """
SELECT u.series_id, date_part('epoch', x.ts) FROM unnest(%(ids)s::int[]) AS u(series_id)
CROSS JOIN LATERAL (
  SELECT ts FROM samples WHERE series_id = u.series_id AND ts <= to_timestamp(%(ws)s)
    AND ts > to_timestamp(%(ws)s - %(gap)s) ORDER BY ts DESC LIMIT 1) x
"""

# A source's own past: median and MAD (scaled to sigma). MAD rather than the interquartile range: a
# fault that has already lasted a quarter of the window (or came back) widens the IQR until the
# fault looks normal; the MAD still holds with up to half of the history anomalous.
# Interval-aware: each sample counts for the seconds it covers (its span from the previous
# sample; the first one takes the series' median span), so a gap's one long-span rate, or a collector
# that sampled faster for a while, weighs by time, not by how many samples it left. With even spans
# this is the plain (lower) median.
HIST_SQL = """
WITH x AS (
  SELECT s.series_id, CASE WHEN m.kind = 'counter' THEN s.rate ELSE s.value END AS v,
         date_part('epoch', s.ts - lag(s.ts) OVER (PARTITION BY s.series_id ORDER BY s.ts)) AS span
  FROM samples s JOIN series se ON se.id = s.series_id JOIN metrics m ON m.id = se.metric_id
  WHERE s.series_id = ANY(%(ids)s) AND s.ts > to_timestamp(%(hs)s) AND s.ts <= to_timestamp(%(he)s)
), iv AS (
  SELECT series_id, percentile_cont(0.5) WITHIN GROUP (ORDER BY span) AS iv FROM x GROUP BY series_id
), y AS (
  SELECT x.series_id, x.v, coalesce(x.span, iv.iv, 1.0) AS wt FROM x JOIN iv USING (series_id) WHERE x.v IS NOT NULL
), med AS (
  SELECT DISTINCT ON (series_id) series_id, v AS hist_med FROM (
    SELECT series_id, v, sum(wt) OVER (PARTITION BY series_id ORDER BY v ROWS UNBOUNDED PRECEDING) AS cum,
           sum(wt) OVER (PARTITION BY series_id) AS tot FROM y) c
  WHERE cum >= 0.5 * tot ORDER BY series_id, cum
), dev AS (
  SELECT y.series_id, abs(y.v - med.hist_med) AS a, y.wt FROM y JOIN med USING (series_id)
)
SELECT med.series_id, med.hist_med, 1.4826 * mad.a AS hist_sigma FROM med JOIN (
  SELECT DISTINCT ON (series_id) series_id, a FROM (
    SELECT series_id, a, sum(wt) OVER (PARTITION BY series_id ORDER BY a ROWS UNBOUNDED PRECEDING) AS cum,
           sum(wt) OVER (PARTITION BY series_id) AS tot FROM dev) c
  WHERE cum >= 0.5 * tot ORDER BY series_id, cum) mad USING (series_id)
"""


def _frame(conn: Any, sql: str, params: dict[str, Any]) -> pd.DataFrame:
    cur = conn.execute(sql, params)
    cols = [d.name for d in cur.description]
    return pd.DataFrame(cur.fetchall(), columns=cols)


def step_summaries(conn: Any, *, job: str, lo: int, hi: int) -> pd.DataFrame:
    return _frame(conn, SUMMARY_SQL, {"job": job, "lo": lo, "hi": hi})


def rank_rows(
    conn: Any, *, job: str, step: int, placement: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every rank's row of `step` (time, phases, and its host, GPU and NIC from `placement`: job_ranks'
    rows, read here when not given) and the step's collectives. The placement is joined here, not in
    the database: the planner, with statistics from before a large job's ranks were stored, took
    job_ranks for one row and looped over all of them for each rank (1.3 s at 4,096 ranks)."""
    steps = _frame(conn, RANKS_SQL, {"job": job, "step": step})
    where = job_ranks(conn, job=job) if placement is None else placement
    if len(steps) and len(where):
        steps = steps.merge(
            where[["rank", *PLACEMENT_COLS]].astype({"rank": steps["rank"].dtype}), on="rank", how="left"
        )
    for c in PLACEMENT_COLS:  # an unplaced rank's: None, as a LEFT JOIN gave
        steps[c] = steps[c].astype(object).where(steps[c].notna(), None) if c in steps else None
    summed = _frame(conn, RANK_COMM_SQL, {"job": job, "step": step})
    if len(summed):  # bounded detail: decompose reads every rank's summed time, the records are a sample
        if len(steps):
            steps["comm_summed"] = steps["rank"].map(_rank_comm(summed))
        coll = pd.DataFrame(
            {"rank": np.array([], np.int64), "seq": np.array([], np.int64), "duration_s": np.array([], float)}
        )
    else:
        coll = _collectives(conn, job=job, step=step)
    for c in ("dur", "data", "fb", "opt", "ckpt"):
        steps[c] = pd.to_numeric(steps[c], errors="coerce")
    coll["duration_s"] = pd.to_numeric(coll["duration_s"], errors="coerce")
    return steps, coll


def _rank_comm(summed: pd.DataFrame) -> pd.Series:
    """Each rank's collective seconds by rank; NaN (decompose takes the ranks' median) for a rank that
    timed fewer of the step's collectives than the most any rank timed. Its lost record may be the
    one that held its wait for a straggler (the step's first collective after a slow loader): its own
    total, even scaled up at its own mean, would make it the step's slowest worker."""
    total, n = summed["total"].astype(float), summed["n"].astype(float)
    return pd.Series(total.where(n >= n.max()).to_numpy(), index=summed["rank"].astype(np.int64).to_numpy())


def _collectives(conn: Any, *, job: str, step: int) -> pd.DataFrame:
    with conn.cursor(binary=True) as cur:
        r = cur.execute(COLL_ARRAYS_SQL, {"job": job, "step": step}).fetchone()
    if r is None or r[0] == 0 or r[0] != r[1]:
        return _frame(conn, COLL_SQL, {"job": job, "step": step})
    rank, seq, dur = (unsend_array(b, t) for b, t in zip(r[2:], (">i4", ">i8", ">f8"), strict=True))
    return pd.DataFrame({"rank": rank.astype(np.int64), "seq": seq, "duration_s": dur})


def series_meta(conn: Any, *, sources: list[str], metrics: list[str]) -> pd.DataFrame:
    return _frame(conn, SERIES_SQL, {"sources": sources, "metrics": metrics})


def pg_array(values: np.ndarray) -> str:
    """A PostgreSQL array literal (`{1,2,3}`) of a numeric or boolean array. psycopg adapts a list
    element by element in Python, which for a large job's scoring set (7,500 series at 256 ranks,
    120,000 at 4,096; eight arrays) cost about as much as the query itself, every step; a literal is
    built once per job topology (engine.py keeps it) and sent as one string the server casts."""
    if values.dtype == bool:
        items = ["t" if v else "f" for v in values.tolist()]
    elif np.issubdtype(values.dtype, np.integer):
        items = [str(v) for v in values.tolist()]
    else:
        items = [repr(v) if math.isfinite(v) else _NONFINITE[str(v)] for v in values.astype(float).tolist()]
    return "{" + ",".join(items) + "}"


_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def scoring_arrays(meta: pd.DataFrame) -> Scoring:
    """The scoring set of `meta` (see outliers()) as arrays, and the array literals the queries take."""
    meta = meta.sort_values("series_id")
    lb = meta["lookback"] > 0
    solo = meta["solo"] if "solo" in meta else pd.Series(False, index=meta.index)
    ids = meta["series_id"].to_numpy(np.int64)
    bits = {}
    if len(ids) and ids[-1] - ids[0] < BITMAP_MAX_SPAN * len(ids):  # one bit per id from the lowest
        b = np.zeros(int(ids[-1] - ids[0]) + 1, np.uint8)
        b[ids - ids[0]] = 1
        bits = {"lo": str(ids[0]), "hi": str(ids[-1]), "bits": (b + ord("0")).tobytes().decode()}
    member = np.zeros(int(ids[-1]) + 1 if len(ids) else 0, bool)
    member[ids] = True
    metric = meta["metric"] if "metric" in meta else pd.Series("", index=meta.index)
    return Scoring(
        ids=ids,
        grp=meta["grp"].to_numpy(np.int64),
        gauge=meta["gauge"].to_numpy(bool),
        floor=meta["floor"].to_numpy(float),
        net=meta["net"].to_numpy(bool),
        solo=solo.to_numpy(bool),
        lit={"ids": pg_array(meta["series_id"].to_numpy()), **bits},
        lookback=tuple(
            (
                float(s),
                bool(g),
                pg_array(x["series_id"].to_numpy()),
                not g and bool(metric[x.index].isin(INCREMENT_METRICS).all()),
            )
            for (s, g), x in meta[lb].groupby(["lookback", "gauge"])
        ),
        member=member,
        floor_rel=(meta["floor_rel"] if "floor_rel" in meta else pd.Series(0.0, index=meta.index)).to_numpy(float),
    )


def unsend_array(buf: bytes | None, dtype: str) -> np.ndarray:
    """A one-dimensional array without NULLs from array_send's bytes (20 bytes of header, then each
    element's 4-byte length and its big-endian value)."""
    if buf is None or len(buf) <= 12:  # NULL (no rows) or an empty array (no dimension)
        return np.zeros(0, dtype)
    return np.frombuffer(buf, dtype=[("n", ">i4"), ("v", dtype)], offset=20)["v"].astype(dtype.lstrip(">"))


def outliers(
    conn: Any,
    *,
    meta: pd.DataFrame,
    ws: float,
    we: float,
    min_z: float = PEER_MIN_Z,
    limit: int = MAX_OUTLIERS,
    arrays: Scoring | None = None,
    edges: bool = True,
) -> tuple[pd.DataFrame, int]:
    """Series whose window value stands out from their peer group (`meta`: series_id, grp, gauge,
    floor, net, solo, lookback: seconds the window reaches back for that series), and how many
    network series had a sample overlapping the window (see window.py for how samples weigh).
    `arrays`: scoring_arrays(meta), when the caller keeps them. `edges`: a coarse counter's edge
    samples are read as a single change outside the window where their neighbours allow it (edges.py);
    False: at their even spread, what the sample itself says."""
    sc = arrays if arrays is not None else scoring_arrays(meta)
    p: dict[str, Any] = {**sc.lit, "ws": ws, "we": we, "gap": MAX_SAMPLE_GAP_S, "scan": NEXT_SCAN_S}
    with conn.transaction():
        conn.execute(SCORING_SETTINGS)
        framed_ok = framed.frames_cover(conn, ws - max(AFTERMATH_S.values(), default=0.0))
        row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'series'::regclass").fetchone()
        n_series = float(row[0]) if row else -1.0
        if framed_ok and win.use_frames(sc, n_series):
            raw, later = framed.window_samples(conn, sc, ws=ws, hi=we + NEXT_SCAN_S, we=we)
        else:
            sql = WINDOW_BITS_SQL if win.use_bitmap(sc, n_series) else WINDOW_SQL
            if sql is WINDOW_SQL:
                conn.execute(BTREE_SETTINGS)
            raw, later = _window_samples(conn, sql, p, we)
        need = np.setdiff1d(sc.ids, later, assume_unique=True)
        rows = conn.execute(PROBES_SQL, {**p, "need": pg_array(need)}).fetchall()
        probe = np.array(sorted((i, t, v, np.nan if r is None else r) for i, t, v, r in rows), float).reshape(-1, 4)
        raw = win.with_probes(raw, win.Samples(probe[:, 0].astype(np.int64), probe[:, 1], probe[:, 2], probe[:, 3]))
        lbs = [
            r
            for lb_s, gauge, ids, inc in sc.lookback
            for r in (
                framed.increments(conn, ws=ws, lb=lb_s, ids=ids)
                if inc and framed_ok
                else conn.execute(
                    LOOKBACK_SQL, {"ws": ws, "lb": lb_s, "gauge": gauge, "lb_ids": ids}, prepare=False
                ).fetchall()
            )
        ]
    wlen = max(we - ws, 1e-3)
    pos, cur_w, share = win.window_values(raw, sc, ws, we, wlen)
    one_id, one_t = win.single_samples(raw)
    del raw

    def resolve(ids: np.ndarray) -> np.ndarray:
        prev = dict(conn.execute(PREVIOUS_SQL, {"ws": ws, "gap": MAX_SAMPLE_GAP_S, "ids": pg_array(ids)}).fetchall())
        t = np.full(len(ids), np.nan)  # the one sample's time: the end of the span
        if len(one_id):
            at = np.minimum(np.searchsorted(one_id, ids), len(one_id) - 1)
            t = np.where(one_id[at] == ids, one_t[at], np.nan)
        return win.share_of(wlen, t, np.array([prev.get(int(i), np.nan) for i in ids], float))

    lb = np.array(lbs, float).reshape(-1, 2)
    allpos, cur, cw = win.with_lookback(sc, pos, cur_w, lb[:, 0].astype(np.int64), lb[:, 1])
    shares = np.ones(len(allpos))
    shares[np.searchsorted(allpos, pos)] = share
    # the least share: a span from MAX_SAMPLE_GAP_S before the window to as long after it
    out, n_net = win.peer_scores(
        sc, allpos, cur, cw, min_z, limit, win.Shares(shares, wlen / (wlen + 2 * MAX_SAMPLE_GAP_S), resolve)
    )
    return (without_edge_changes(conn, out, sc, ws=ws, we=we, min_z=min_z) if edges else out), n_net


def without_edge_changes(
    conn: Any, out: pd.DataFrame, sc: win.Scoring, *, ws: float, we: float, min_z: float = PEER_MIN_Z
) -> pd.DataFrame:
    """`out` (peer_scores) with the window value of each counter sampled slower than the window less
    what its edge samples owe to a change outside it (edges.py); a peer outlier that no longer
    stands out by `min_z` is dropped. One read of those few series' samples around the window."""
    if out.empty:
        return out
    pos = np.searchsorted(sc.ids, out["series_id"].to_numpy())
    cur, cur_w = out["cur"].to_numpy(float), out["cur_w"].to_numpy(float)
    floor = out["window_floor"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        coarse = floor < sc.floor[pos]  # its floor at a share under 1: an interval longer than the window
    ask = np.flatnonzero(coarse & ~sc.gauge[pos] & (cur == cur_w))
    if not len(ask):
        return out
    rows = conn.execute(
        NEIGHBOURS_SQL, {"ids": pg_array(sc.ids[pos[ask]]), "ws": ws, "we": we, "gap": MAX_SAMPLE_GAP_S}
    ).fetchall()
    got = np.array(rows, float).reshape(-1, 3)
    cur = cur.copy()
    for k in ask:
        mine = got[got[:, 0] == sc.ids[pos[k]]]
        cur[k] -= edge_excess(mine[:, 1], mine[:, 2], ws, we)
    if np.array_equal(cur, out["cur"].to_numpy(float), equal_nan=True):
        return out
    peer_z = out["peer_z"].to_numpy(float)
    z = (cur - out["peer_med"].to_numpy(float)) / np.maximum(out["peer_mad"].to_numpy(float), floor)
    keep = np.isnan(peer_z) | (z >= min_z)
    return out.assign(cur=cur, cur_w=cur, peer_z=np.where(np.isnan(peer_z), np.nan, z))[keep].reset_index(drop=True)


def _window_samples(conn: Any, sql: str, p: dict[str, Any], we: float) -> tuple[win.Samples, np.ndarray]:
    """WINDOW_SQL's samples as win.first_after leaves them, and the series with a sample after we."""
    with conn.cursor(binary=True) as cur:
        r = cur.execute(sql, p, prepare=False).fetchone()
    assert r is not None
    sid, ts, value, rate = (unsend_array(b, t) for b, t in zip(r, (">i4", ">i8", ">f8", ">f8"), strict=True))
    return win.first_after(win.Samples(sid, win.epoch_s(ts), value, rate), ts > win.pg_us(we))


def history(conn: Any, *, ids: list[int], hs: float, he: float) -> pd.DataFrame:
    if not ids:
        return pd.DataFrame(columns=["series_id", "hist_med", "hist_sigma"])
    df = _frame(conn, HIST_SQL, {"ids": ids, "hs": hs, "he": he})
    return df.astype({"hist_med": float, "hist_sigma": float})


def job_ranks(conn: Any, *, job: str) -> pd.DataFrame:
    return _frame(conn, "SELECT rank, host, gpu, nic FROM job_ranks WHERE job = %(job)s", {"job": job})


def links(conn: Any) -> pd.DataFrame:
    return _frame(conn, "SELECT a, b FROM links", {})


# A host's source is a volume when it reports block I/O (what the storage collectors post for a mount
# point and for a disk alike), never because of how it is spelled: `node7:/mnt/ckpt`, `node7:nvme0n1`
# and `node7:vol7` are volumes, `node7:mlx5_0` is not.
VOLUME_METRICS = [
    "read_ops_total",
    "write_ops_total",
    "read_bytes_total",
    "write_bytes_total",
    "read_latency_seconds",
    "write_latency_seconds",
]


def host_volumes(conn: Any, *, hosts: list[str]) -> list[str]:
    """Storage sources of the job's hosts (sources with block I/O series), and storage devices'."""
    cur = conn.execute(
        "SELECT src.name FROM sources src WHERE (src.device = ANY(%(h)s) AND EXISTS ("
        "  SELECT 1 FROM series se JOIN metrics m ON m.id = se.metric_id"
        "  WHERE se.source_id = src.id AND m.name = ANY(%(m)s))) "
        "OR src.device IN (SELECT name FROM devices WHERE kind = 'storage')",
        {"h": hosts, "m": VOLUME_METRICS},
    )
    return [r[0] for r in cur.fetchall()]


# Which of `volumes` had reads counted over [ws, we] (a rate sample inside it or the first one after,
# which covers its end): one index probe per series of their read counters.
VOLUMES_READ_SQL = """
SELECT DISTINCT src.name FROM sources src JOIN series se ON se.source_id = src.id
JOIN metrics m ON m.id = se.metric_id AND m.name = ANY(%(metrics)s)
WHERE src.name = ANY(%(volumes)s) AND EXISTS (
  SELECT 1 FROM samples s WHERE s.series_id = se.id AND s.ts > to_timestamp(%(ws)s)
    AND s.ts <= to_timestamp(%(we)s + %(gap)s) AND s.rate > 0)
ORDER BY 1
"""


def _volumes_counting(conn: Any, *, volumes: list[str], metrics: list[str], ws: float, we: float) -> list[str]:
    cur = conn.execute(
        VOLUMES_READ_SQL, {"volumes": volumes, "metrics": metrics, "ws": ws, "we": we, "gap": MAX_SAMPLE_GAP_S}
    )
    return [r[0] for r in cur.fetchall()]


def volumes_read(conn: Any, *, volumes: list[str], ws: float, we: float) -> list[str]:
    """The volumes of `volumes` the step's window saw read (read ops or bytes counted)."""
    return _volumes_counting(conn, volumes=volumes, metrics=["read_ops_total", "read_bytes_total"], ws=ws, we=we)


def volumes_written(conn: Any, *, volumes: list[str], ws: float, we: float) -> list[str]:
    """The volumes of `volumes` the step's window saw written (write ops or bytes counted)."""
    return _volumes_counting(conn, volumes=volumes, metrics=["write_ops_total", "write_bytes_total"], ws=ws, we=we)


# Bytes written to the volumes in each step's window (baseline.write_burst): the counted rises of
# their `write_bytes_total` (rate x the sample's interval, rises only), one range read over the
# steps' span; most samples of a volume that only checkpoints write are flat and left out here.
WRITES_SQL = """
SELECT t, dt, b FROM (
  SELECT extract(epoch FROM s.ts)::float8 AS t,
         least(extract(epoch FROM s.ts - lag(s.ts) OVER (PARTITION BY s.series_id ORDER BY s.ts)), %(gap)s) AS dt,
         s.rate AS b
  FROM series se JOIN sources src ON src.id = se.source_id
  JOIN metrics m ON m.id = se.metric_id AND m.name = 'write_bytes_total'
  JOIN samples s ON s.series_id = se.id AND s.ts > to_timestamp(%(ws)s) AND s.ts <= to_timestamp(%(we)s)
  WHERE src.name = ANY(%(volumes)s)) x
WHERE b > 0 AND dt > 0
"""


def step_writes(conn: Any, *, volumes: list[str], ws: float, we: float) -> np.ndarray:
    """The rises of `volumes`' written bytes between ws and we: rows (end of the sample's interval,
    its length in seconds, bytes a second over it), for write_burst.spread_rises."""
    if not volumes:
        return np.zeros((0, 3))
    rows = conn.execute(
        WRITES_SQL, {"volumes": volumes, "ws": ws, "we": we + MAX_SAMPLE_GAP_S, "gap": MAX_SAMPLE_GAP_S}
    ).fetchall()
    return np.array(rows, float).reshape(-1, 3)


# The distinct sources of a job's `checkpoint` events, one index probe each (a loose index scan on
# events_job_checkpoint, migration 0007): a long job logs one event per host and checkpoint, millions
# in a day at 512 hosts, and this runs every topo_ttl_s (TOPO_STAMP_SQL).
CHECKPOINT_SOURCES_CTE = """
WITH RECURSIVE ckpt AS (
  (SELECT source FROM events WHERE job = %(job)s AND kind = 'checkpoint' ORDER BY source LIMIT 1)
  UNION ALL
  SELECT (SELECT e.source FROM events e WHERE e.job = %(job)s AND e.kind = 'checkpoint' AND e.source > ckpt.source
          ORDER BY e.source LIMIT 1)
  FROM ckpt WHERE ckpt.source IS NOT NULL
)"""


def checkpoint_sources(conn: Any, *, job: str) -> frozenset[str]:
    """Where the job wrote its checkpoints: the sources (`host:/mount`) of its `checkpoint` events."""
    cur = conn.execute(CHECKPOINT_SOURCES_CTE + " SELECT source FROM ckpt WHERE source IS NOT NULL", {"job": job})
    return frozenset(r[0] for r in cur.fetchall())


# What a job's cached topology was built from (engine._job_topo): its ranks, the links, the storage
# devices, the newest source and series ids (new volumes and series; none are deleted) and where it
# wrote checkpoints. One round trip of index look-ups and small aggregates instead of rebuilding the
# job's scoring set (120,000 series at 4,096 ranks) whenever the cache entry's time is up.
TOPO_STAMP_SQL = (
    CHECKPOINT_SOURCES_CTE
    + """
SELECT (SELECT count(*) || ':' || coalesce(sum(hashtext(concat_ws('|', rank, host, gpu, nic))), 0)
        FROM job_ranks WHERE job = %(job)s),
       (SELECT count(*) || ':' || coalesce(sum(hashtext(a || '|' || b)), 0) FROM links),
       (SELECT count(*) || ':' || coalesce(sum(hashtext(name)), 0) FROM devices WHERE kind = 'storage'),
       (SELECT max(id) FROM sources), (SELECT max(id) FROM series),
       (SELECT string_agg(source, '|' ORDER BY source) FROM ckpt WHERE source IS NOT NULL)
"""
)


STAMP_SERIES = 4  # the stamp's newest series id


def topology_stamp(conn: Any, *, job: str) -> tuple[Any, ...]:
    r = conn.execute(TOPO_STAMP_SQL, {"job": job}).fetchone()
    return tuple(r) if r is not None else (None,) * 6


def has_series_after(conn: Any, *, sources: list[str], metrics: list[str], after: int) -> bool:
    """Whether any of `sources` has a series of `metrics` with an id above `after` (a range of the
    series primary key: the series created since)."""
    r = conn.execute(
        "SELECT 1 FROM series se JOIN sources src ON src.id = se.source_id JOIN metrics m ON m.id = se.metric_id "
        "WHERE se.id > %(after)s AND src.name = ANY(%(sources)s) AND m.name = ANY(%(metrics)s) LIMIT 1",
        {"after": after, "sources": sources, "metrics": metrics},
    ).fetchone()
    return r is not None


# -- steps, attributions and jobs ---------------------------------------------------------------


def step_range(conn: Any, *, job: str, from_ts: datetime | None, to_ts: datetime | None) -> tuple[int, int] | None:
    """First and last step of `job` starting within [from_ts, to_ts] (open ends when None)."""
    r = conn.execute(
        "SELECT min(step), max(step) FROM steps WHERE job = %s AND (%s::timestamptz IS NULL OR "
        "start_ts >= %s) AND (%s::timestamptz IS NULL OR start_ts <= %s)",
        (job, from_ts, from_ts, to_ts, to_ts),
    ).fetchone()
    return None if r is None or r[0] is None else (int(r[0]), int(r[1]))


def job_names(conn: Any) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM jobs ORDER BY name").fetchall()]


def last_attributed_step(conn: Any, *, job: str) -> int | None:
    r = conn.execute("SELECT max(step) FROM attributions WHERE job = %s", (job,)).fetchone()
    return None if r is None or r[0] is None else int(r[0])


def last_step(conn: Any, *, job: str) -> int | None:
    r = conn.execute("SELECT max(step) FROM steps WHERE job = %s", (job,)).fetchone()
    return None if r is None or r[0] is None else int(r[0])


def unattributed_steps(conn: Any, *, job: str, after: int) -> list[tuple[int, float, float, int]]:
    """Steps after `after` with no attribution yet: (step, earliest start and latest end as epoch
    seconds, ranks reported)."""
    return [
        (int(s), float(b), float(e), int(n))
        for s, b, e, n in conn.execute(
            """SELECT s.step, extract(epoch FROM min(s.start_ts))::float8, extract(epoch FROM max(s.end_ts))::float8,
                  count(*) FROM steps s
           WHERE s.job = %s AND s.step > %s AND NOT EXISTS
             (SELECT 1 FROM attributions a WHERE a.job = s.job AND a.step = s.step)
           GROUP BY s.step ORDER BY s.step""",
            (job, after),
        ).fetchall()
    ]


def telemetry_horizon(conn: Any, *, sources: list[str]) -> float | None:
    """Newest sample time (epoch seconds) over the series of `sources`; None when they have none."""
    r = conn.execute(
        """SELECT extract(epoch FROM max(x.ts))::float8 FROM series se JOIN sources src ON src.id = se.source_id,
           LATERAL (SELECT ts FROM samples s WHERE s.series_id = se.id ORDER BY ts DESC LIMIT 1) x
           WHERE src.name = ANY(%s)""",
        (sources,),
    ).fetchone()
    return None if r is None or r[0] is None else float(r[0])


def step_numbers(conn: Any, *, job: str, lo: int, hi: int) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT DISTINCT step FROM steps WHERE job = %s AND step BETWEEN %s AND %s ORDER BY step", (job, lo, hi)
        ).fetchall()
    ]


def attributed_steps(conn: Any, *, job: str, lo: int, hi: int) -> set[int]:
    return {
        int(r[0])
        for r in conn.execute(
            "SELECT step FROM attributions WHERE job = %s AND step BETWEEN %s AND %s", (job, lo, hi)
        ).fetchall()
    }


_VERDICT_COLS = (
    "rules->>'verdict', evidence @> '[{\"kind\": \"corroborated\"}]'::jsonb, "
    'evidence @> \'[{"kind": "onset"}]\'::jsonb, evidence @> \'[{"kind": "untimed"}]\'::jsonb'
)
_STORED_SQL = (
    "SELECT step, slow, {answers}, " + _VERDICT_COLS + " FROM attributions WHERE job = %s AND step BETWEEN %s AND %s"
)
_ANSWERS = "lost_s, layer, component, causes"


def _verdict_rule(slow: bool, rule: str | None, promoted: bool, onset: bool, untimed: bool) -> str:
    """The rule that decided a stored verdict. An answer stored before answers named their rules gets
    the rule its evidence shows: a `corroborated` row was a promotion, an `onset` or `untimed` row a
    demotion, else the bar."""
    if rule:
        return str(rule)
    if slow:
        return rule_ids.PROMOTE_BORDERLINE if promoted else rule_ids.VERDICT_BAR
    if onset:
        return rule_ids.DEMOTE_UNSURE_ONSET
    return rule_ids.DEMOTE_UNTIMED if untimed else rule_ids.VERDICT_UNDER_BAR


def stored_attributions(conn: Any, *, job: str, lo: int, hi: int, answers: bool = True) -> list[tuple[Any, ...]]:
    """(step, slow, lost_s, layer, component, causes, verdict rule) of the stored attributions in
    [lo, hi], in one read (the restate pass needs both the answers and their verdicts);
    `answers=False`: the four answer columns None (a listing needs only the verdicts)."""
    sql = _STORED_SQL.replace("{answers}", _ANSWERS if answers else "NULL, NULL, NULL, NULL")
    return [
        (*r[:6], _verdict_rule(bool(r[1]), r[6], bool(r[7]), bool(r[8]), bool(r[9])))
        for r in conn.execute(sql, (job, lo, hi)).fetchall()
    ]


def stored_verdicts(rows: list[tuple[Any, ...]]) -> dict[int, tuple[bool, str]]:
    """step -> (slow, the rule that decided it) of `rows` as stored_attributions gives them."""
    return {int(r[0]): (bool(r[1]), str(r[6])) for r in rows}


def store_attribution(conn: Any, *, job: str, attribution: Mapping[str, Any]) -> None:
    a = attribution
    conn.execute(
        """INSERT INTO attributions (job, step, step_start, slow, duration_s, baseline_s, layer, component,
                                     confidence, lost_s, evidence, causes, rules)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (job, step) DO UPDATE SET computed_at = now(), step_start = EXCLUDED.step_start,
             slow = EXCLUDED.slow, duration_s = EXCLUDED.duration_s, baseline_s = EXCLUDED.baseline_s,
             layer = EXCLUDED.layer, component = EXCLUDED.component, confidence = EXCLUDED.confidence,
             lost_s = EXCLUDED.lost_s, evidence = EXCLUDED.evidence, causes = EXCLUDED.causes,
             rules = EXCLUDED.rules""",
        (
            job,
            a["step"],
            a["start"],
            a["slow"],
            a["duration_s"],
            a["baseline_s"],
            a["layer"],
            a["component"],
            a["confidence"],
            a["lost_s"],
            json.dumps(a["evidence"]),
            json.dumps(a["causes"]),
            json.dumps(a["rules"]) if a.get("rules") else None,
        ),
    )


# -- GPU and host evidence ------------------------------------------------------------------------

# Per series of the given sources and metrics: the window's min and max value and max rate, and the
# median value and rate of the source's own past with the rate's MAD (scaled to sigma).
# Interval-aware, as window.py: a GPU/host state (link width, a throttle flag, a clock) holds
# from one reading to the next, so the state the step ran in is the last reading at or before ws plus
# the readings inside the window, however long the series' interval is; a counter's rate covers the span
# up to its sample, so the rates that overlap the window are those inside it plus the first one after
# it. Each neighbour is one index probe per series, bounded by %(gap)s (MAX_SAMPLE_GAP_S). The past is
# what lies before the first reading used, so the window's own state never becomes its baseline.
# A series with only a past is kept: a capability (a link's maximum width) in a collector's gap.
# Everything per series in LATERAL subqueries, nothing joined between CTEs: the planner estimated
# the series of `se` at one row, and for a scan of 64 GPUs (511 series) it ran the history's MAD as a
# nested loop over two CTE scans, 511 x 511 x 12,708 rows: 27-55 s for one step, where this is 3 ms.
DEVICE_SQL = """
WITH se AS (
  SELECT se.id, src.name AS source, m.name AS metric, m.kind, se.labels::text AS labels
  FROM sources src JOIN series se ON se.source_id = src.id JOIN metrics m ON m.id = se.metric_id
  WHERE src.name = ANY(%(sources)s) AND m.name = ANY(%(metrics)s)
)
SELECT se.source, se.metric, se.kind, se.labels, least(inw.vmin, p.value) AS wmin,
       greatest(inw.vmax, p.value) AS wmax, greatest(inw.rmax, n.rate) AS wrate, hm.hval, hm.hrate,
       (SELECT 1.4826 * percentile_cont(0.5) WITHIN GROUP (ORDER BY abs(r - hm.hrate))
        FROM unnest(hm.rates) AS r) AS hsig
FROM se
LEFT JOIN LATERAL (SELECT ts, value FROM samples WHERE series_id = se.id AND ts <= to_timestamp(%(ws)s)
                     AND ts > to_timestamp(%(ws)s - %(gap)s) ORDER BY ts DESC LIMIT 1) p ON true
LEFT JOIN LATERAL (SELECT rate FROM samples WHERE series_id = se.id AND ts > to_timestamp(%(we)s)
                     AND ts <= to_timestamp(%(we)s + %(gap)s) ORDER BY ts LIMIT 1) n ON true
CROSS JOIN LATERAL (SELECT count(*) AS k, min(value) AS vmin, max(value) AS vmax, max(rate) AS rmax FROM samples
                    WHERE series_id = se.id AND ts > to_timestamp(%(ws)s) AND ts <= to_timestamp(%(we)s)) inw
CROSS JOIN LATERAL (
  SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY h.value) AS hval,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY h.rate) AS hrate, array_agg(h.rate) AS rates
  FROM samples h WHERE h.series_id = se.id AND h.ts > to_timestamp(%(hs)s) AND h.ts <= to_timestamp(%(he)s)
    AND (p.ts IS NULL OR h.ts < p.ts)) hm
WHERE inw.k > 0 OR p.value IS NOT NULL OR n.rate IS NOT NULL OR hm.hval IS NOT NULL
"""

EVENTS_SQL = """
SELECT source, start_ts, attrs::text AS attrs FROM events
WHERE kind = ANY(%(kinds)s) AND source = ANY(%(sources)s)
  AND start_ts > to_timestamp(%(es)s) AND start_ts <= to_timestamp(%(we)s)
ORDER BY start_ts
"""


def device_rows(
    conn: Any, *, sources: list[str], metrics: list[str], ws: float, we: float, hs: float, he: float
) -> pd.DataFrame:
    """Window and own-history values of the GPU/host series of `sources` (see DEVICE_SQL): the window
    [ws, we] is the step's own; the readings around it that describe it are found per series."""
    df = _frame(
        conn,
        DEVICE_SQL,
        {"sources": sources, "metrics": metrics, "ws": ws, "we": we, "hs": hs, "he": he, "gap": MAX_SAMPLE_GAP_S},
    )
    for c in ("wmin", "wmax", "wrate", "hval", "hrate", "hsig"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


READINGS_SQL = """
SELECT m.name AS metric, se.labels::text AS labels, extract(epoch FROM s.ts)::float8 AS ts, s.value
FROM sources src JOIN series se ON se.source_id = src.id JOIN metrics m ON m.id = se.metric_id
JOIN samples s ON s.series_id = se.id
WHERE src.name = %(source)s AND m.name = ANY(%(metrics)s)
  AND s.ts > to_timestamp(%(fs)s) AND s.ts <= to_timestamp(%(ts)s)
ORDER BY s.ts
"""


def readings(conn: Any, *, source: str, metrics: list[str], fs: float, ts: float) -> pd.DataFrame:
    """The raw readings (metric, labels, ts, value) of `source`'s `metrics` in (fs, ts], oldest first."""
    df = _frame(conn, READINGS_SQL, {"source": source, "metrics": metrics, "fs": fs, "ts": ts})
    for c in ("ts", "value"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def device_events(conn: Any, *, sources: list[str], kinds: list[str], es: float, we: float) -> pd.DataFrame:
    """Events of `kinds` on `sources` that started in (es, we]."""
    return _frame(conn, EVENTS_SQL, {"sources": sources, "kinds": kinds, "es": es, "we": we})


# The state each source's series was in during the window, as DEVICE_SQL reads it: its last reading
# at or before ws (one bounded index probe) and its readings inside the window.
PEER_SQL = """
WITH se AS (
  SELECT se.id FROM sources src JOIN series se ON se.source_id = src.id
  JOIN metrics m ON m.id = se.metric_id AND m.name = %(metric)s WHERE src.name = ANY(%(sources)s)
)
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY mx) FROM (
  SELECT greatest(p.value, (SELECT max(s.value) FROM samples s WHERE s.series_id = se.id
                              AND s.ts > to_timestamp(%(ws)s) AND s.ts <= to_timestamp(%(we)s))) AS mx
  FROM se LEFT JOIN LATERAL (SELECT value FROM samples WHERE series_id = se.id AND ts <= to_timestamp(%(ws)s)
                               AND ts > to_timestamp(%(ws)s - %(gap)s) ORDER BY ts DESC LIMIT 1) p ON true) x
WHERE mx IS NOT NULL
"""


def peer_median(conn: Any, *, sources: list[str], metric: str, ws: float, we: float) -> float | None:
    """Median over `sources` of each one's highest `metric` value in the window (None without data)."""
    r = conn.execute(
        PEER_SQL, {"sources": sources, "metric": metric, "ws": ws, "we": we, "gap": MAX_SAMPLE_GAP_S}
    ).fetchone()
    return None if r is None or r[0] is None else float(r[0])
