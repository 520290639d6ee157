"""Per-series window values and peer scores of one step (queries.outliers), in numpy.

The database reads the window's samples (one array per column, queries.WINDOW_SQL) and the few
index probes around it (queries.PROBES_SQL, LOOKBACK_SQL); the rest is here. As SQL (sorts, two window
aggregates, a group aggregate and a percentile per peer group over 500,000 rows and 125,000 series
at 4,096 ranks) it cost ~1 s of database CPU per step, nearly all of it executor overhead per row;
the same arithmetic on arrays costs tens of milliseconds. Every expression keeps the order of
operations the SQL had (sequential sums in time order, percentile_cont's interpolation) so that the
values are the same to the last bit.

How a sample weighs (interval-aware): a sample at t whose series sampled before at t' covers
(t', t] (its rate is the mean over that span; a gauge reads the span's state). The samples that
overlap the window [ws, we] are those in (ws, we] and the first one after we (its span holds the
window's tail, or the whole window when a slow collector has no sample inside it). No look-back
probe: the first in-window sample's overlap is t - ws whatever its predecessor. Each series'
interval is learnt from these spans (the shortest: a lost sample lengthens one); the first sample's
own span is not seen and takes it.
Value: the highest sample, each sample's deviation from the series' time-weighted mean over the
window counted in proportion to its share c = overlap / min(span, window). A sample inside the window
(c = 1) counts whole, as does a 10-s sample that holds the whole 2-s window (it is all that is known
of it); an edge sample mostly about a neighbouring step counts for its share. The max (rather than
the mean) keeps an anomaly that fills only part of the window (a fault starting 70 % into the step)
at its height instead of averaging it away over the healthy rest.
A counter sampled slower than the window (an 8-s host collector, a 2-s step) reads the mean rate over
its span: a burst confined to the step shows at only window / interval of its height (a 210/s
retransmission burst over a 2.15-s step read 129/s in its 8-s sample, under three floors). Its floor,
the least excess that can matter, is meant per second of the window, so it counts at the same share
(`share`, with the floor's use in peer_scores and localize.finish_scores); the peers' MAD, read from
spans as long, needs no such change. The interval is the series' shortest span in the window; a series
with one sample there gets the time of its sample before the window (queries.PREVIOUS_SQL), asked only
for the series that could stand out at all (peer_scores): a step shorter than a 2-s collector's
interval would otherwise cost an index probe for each of a large job's series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fabricscope.service.correlate.constants import (
    BITMAP_MIN_SERIES,
    BITMAP_MIN_SHARE,
    FRAMES_MIN_SHARE,
    LEVEL_FLOOR_MIN_SHARE,
)


@dataclass(frozen=True)
class Scoring:
    """A job's scoring set as arrays, by position in `ids` (ascending series ids); built once per
    topology (engine.py keeps it). `lit`: the database's array literals (queries.pg_array);
    `lookback`: per (seconds, gauge) class of the series with a look-back, the literal of their ids
    and whether they are all increment counters (service/db/frames.py: their rises are kept apart)."""

    ids: np.ndarray
    grp: np.ndarray
    gauge: np.ndarray
    floor: np.ndarray
    net: np.ndarray
    solo: np.ndarray
    lit: dict[str, str]
    lookback: tuple[tuple[float, bool, str, bool], ...] = ()
    member: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # by series id: in `ids`
    # per series, the share of its level its floor shrinks to (localize.LEVEL_FLOORS; 0: absolute);
    # empty: none does
    floor_rel: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def has(self, sid: np.ndarray) -> np.ndarray:
        """Whether each series id is in the set (a table lookup, not a search)."""
        m = self.member
        if not len(m):
            return np.zeros(len(sid), bool)
        return (sid < len(m)) & m[np.minimum(sid, len(m) - 1)]


@dataclass
class Samples:
    """Samples of the window's series: series id, epoch seconds, value, rate (NaN: NULL)."""

    sid: np.ndarray
    t: np.ndarray
    value: np.ndarray
    rate: np.ndarray


_PG_EPOCH_US = 946_684_800_000_000  # 1970-01-01 in PostgreSQL's timestamps (microseconds from 2000)


def epoch_s(ts_us: np.ndarray) -> np.ndarray:
    """date_part('epoch', ts) of stored timestamps (int64 microseconds from 2000): PostgreSQL divides
    the microseconds since 1970 by 1e6 in double precision, as this does."""
    return (ts_us + _PG_EPOCH_US).astype(np.float64) / 1e6


def pg_us(seconds: float) -> np.int64:
    """to_timestamp(seconds) as stored: rounded to the microsecond (rint) after the shift to 2000."""
    return np.int64(np.rint((seconds - _PG_EPOCH_US / 1e6) * 1e6))


def use_bitmap(sc: Scoring, n_series: float) -> bool:
    """Whether to read the window's whole time range and keep the job's series by bitmap
    (queries.WINDOW_BITS_SQL) rather than let the planner choose with the ids: when the job has at
    least BITMAP_MIN_SERIES series and BITMAP_MIN_SHARE of the database's (`n_series`: the planner's
    count, -1 when unknown), the range is mostly the job's and reading it all costs less than
    ~3 us of index descent per series. Both give the same samples."""
    return (
        "bits" in sc.lit
        and len(sc.ids) >= BITMAP_MIN_SERIES
        and n_series > 0
        and len(sc.ids) >= BITMAP_MIN_SHARE * n_series
    )


def use_frames(sc: Scoring, n_series: float) -> bool:
    """Whether to read the window from sample frames (correlate/framed.py) rather than sample rows:
    when the job holds at least FRAMES_MIN_SHARE of the database's series (`n_series`, the planner's
    count, -1 when unknown), so that the other series' samples the frames also carry cost less than
    an index range per job series. Both give the same samples."""
    return n_series > 0 and len(sc.ids) >= FRAMES_MIN_SHARE * n_series


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") of non-negative int32-range keys as one or two 16-bit radix
    passes (numpy radix-sorts only keys of 16 bits or fewer): O(n), where the timsort of frames from
    many writers (no long runs) cost 4x as much at 370,000 samples."""
    if not len(keys) or keys.max() < 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    o = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return o[np.argsort((keys[o] >> 16).astype(np.uint16), kind="stable")]


def first_after(s: Samples, after: np.ndarray) -> tuple[Samples, np.ndarray]:
    """`s` in (series, time) order without the samples after the window but each series' first one;
    and the series that have none after it (they need a probe further on)."""
    o = _stable_order(s.sid)  # samples come in time order: then this is the (sid, t) order
    sid, t = s.sid[o], s.t[o]
    if ((sid[1:] == sid[:-1]) & (t[1:] < t[:-1])).any():  # not: a late write, a same-second duplicate
        o = np.lexsort((s.t, s.sid))
        sid = s.sid[o]
    after = after[o]
    a_sid = sid[after]
    first = np.ones(len(a_sid), bool)
    first[1:] = a_sid[1:] != a_sid[:-1]
    keep = ~after
    keep[np.flatnonzero(after)[first]] = True
    o = o[keep]
    value = s.value[o]
    rate = value if s.rate is s.value else s.rate[o]  # frames carry one reading in both
    return Samples(s.sid[o], s.t[o], value, rate), a_sid[first]


def with_probes(s: Samples, p: Samples) -> Samples:
    """`s` (sorted) with each probe's sample appended after its series' samples (it is later)."""
    if not len(p.sid):
        return s
    at = np.searchsorted(s.sid, p.sid, side="right")
    return Samples(
        *(np.insert(a, at, b) for a, b in ((s.sid, p.sid), (s.t, p.t), (s.value, p.value), (s.rate, p.rate)))
    )


def single_samples(s: Samples) -> tuple[np.ndarray, np.ndarray]:
    """Ids and times of the series with one sample in `s` (sorted by series): its span, and so the
    series' interval, is unseen (a collector slower than the window: a probe's sample alone)."""
    n = len(s.sid)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0)
    new = np.ones(n, bool)
    new[1:] = s.sid[1:] != s.sid[:-1]
    first = np.flatnonzero(new)  # sorted by series: one pass, not np.unique's sort (500,000 samples)
    one = first[np.diff(first, append=n) == 1]
    return s.sid[one], s.t[one]


def share_of(wlen: float, t: np.ndarray, prev: np.ndarray | float) -> np.ndarray:
    """The window's share of each span (prev, t]: 1 when the span is unknown (NaN) or no longer."""
    with np.errstate(invalid="ignore", divide="ignore"):
        span = t - prev
        return np.where(span > wlen, wlen / span, 1.0)


def window_values(
    s: Samples, sc: Scoring, ws: float, we: float, wlen: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions (in sc.ids) of the series with a usable sample in the window, their values, and the
    share of each one's sampling interval the window is (1 for a gauge or an interval no longer than
    the window; NaN for a counter whose interval is unseen: peer_scores resolves it where it matters;
    the module's docstring)."""
    n = len(s.sid)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    new = np.ones(n, bool)
    new[1:] = s.sid[1:] != s.sid[:-1]
    starts = np.flatnonzero(new)
    blk = np.cumsum(new) - 1
    pos = np.searchsorted(sc.ids, s.sid[starts])
    x = s.value if s.rate is s.value else np.where(sc.gauge[pos][blk], s.value, s.rate)
    xok = ~np.isnan(x)
    prev = np.empty(n)
    prev[0] = np.nan
    prev[1:] = s.t[:-1]
    prev[new] = np.nan
    span = s.t - prev
    ov = np.minimum(s.t, we) - np.fmax(prev, ws)  # a series' first sample (prev NaN) from ws
    iv = np.fmin.reduceat(span, starts)  # NaN (NULL) for a series with one sample
    # sum() in SQL adds in row order, as bincount does: the same sums to the last bit
    bx = blk[xok]
    s1 = np.bincount(bx, weights=(ov * x)[xok], minlength=len(starts))
    s2 = np.bincount(bx, weights=ov[xok], minlength=len(starts))
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(s2 != 0, s1 / np.where(s2 != 0, s2, 1.0), np.nan)[blk]
        cm = np.where(np.isnan(m), x, m)
        own = span.copy()
        own[starts] = iv  # a series' first sample (its span unseen) takes the series' interval
        own = np.where(np.isnan(own), wlen, own)
        c = np.minimum(1.0, np.maximum(ov, 0.0) / np.maximum(np.minimum(own, wlen), 1e-9))
        v = (cm + c * (x - cm))[xok]
    b = bx
    if not len(b):
        return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
    bnew = np.ones(len(b), bool)
    bnew[1:] = b[1:] != b[:-1]
    bst = np.flatnonzero(bnew)
    at = pos[b[bst]]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sc.gauge[at], 1.0, share_of(wlen, iv[b[bst]], 0.0))
        share[~sc.gauge[at] & np.isnan(iv[b[bst]])] = np.nan
    return at, np.maximum.reduceat(v, bst), share


def with_lookback(
    sc: Scoring, pos: np.ndarray, cur_w: np.ndarray, lb_ids: np.ndarray, lb_max: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The series with a window value or a look-back maximum (what SQL's FULL JOIN of the two kept):
    their positions, greatest(window, look-back) and the window's alone (NaN: none)."""
    lb_pos = np.searchsorted(sc.ids, lb_ids)
    has = np.zeros(len(sc.ids), bool)
    has[pos] = has[lb_pos] = True
    allpos = np.flatnonzero(has)
    cw = np.full(len(allpos), np.nan)
    cw[np.searchsorted(allpos, pos)] = cur_w
    cur = cw.copy()
    at = np.searchsorted(allpos, lb_pos)
    cur[at] = np.fmax(cur[at], lb_max)
    return allpos, cur, cw


def _median_by(grp: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per row, percentile_cont(0.5) of `v` over the rows of its group (PostgreSQL's interpolation:
    lo + (hi - lo) * 0.5, not (lo + hi) / 2, which can differ in the last bit)."""
    o = np.argsort(v)  # then by group, stably: the (group, value) order lexsort gave, in half the time
    o = o[_stable_order(grp[o])] if len(grp) and grp.min() >= 0 and grp.max() < 1 << 31 else np.lexsort((v, grp))
    g, sv = grp[o], v[o]
    new = np.ones(len(g), bool)
    new[1:] = g[1:] != g[:-1]
    st = np.flatnonzero(new)
    cnt = np.diff(np.append(st, len(g)))
    k = 0.5 * (cnt - 1)
    lo, hi = st + np.floor(k).astype(np.int64), st + np.ceil(k).astype(np.int64)
    med = np.where(lo == hi, sv[lo], sv[lo] + (sv[hi] - sv[lo]) * (k - np.floor(k)))
    out = np.empty(len(v))
    out[o] = np.repeat(med, cnt)
    return out


def level_floor(floor: np.ndarray, rel: np.ndarray, level: np.ndarray) -> np.ndarray:
    """`floor`, or for a series with a relative floor (`rel` > 0: localize.LEVEL_FLOORS) `rel` of its
    `level` when that is less, never under LEVEL_FLOOR_MIN_SHARE of `floor`."""
    if not len(rel) or not np.any(rel > 0):
        return floor
    with np.errstate(invalid="ignore"):
        own = np.minimum(floor, np.maximum(rel * np.abs(level), LEVEL_FLOOR_MIN_SHARE * floor))
    return np.where((rel > 0) & np.isfinite(own), own, floor)


@dataclass(frozen=True)
class Shares:
    """What share of each series' floor counts (window_values): `share` per series (NaN: its interval
    unseen), `share_lo` the least share there is, `resolve` series ids -> shares (one index probe each)."""

    share: np.ndarray
    share_lo: float = 1.0
    resolve: Callable[[np.ndarray], np.ndarray] | None = None


def peer_scores(
    sc: Scoring,
    pos: np.ndarray,
    cur: np.ndarray,
    cur_w: np.ndarray,
    min_z: float,
    limit: int,
    shares: Shares | None = None,
) -> tuple[pd.DataFrame, int]:
    """Series whose value stands out from their peer group's median by `min_z` MADs (the highest
    `limit`), the solo series (no peers: no peer score), and how many network series have a value.
    `share` (window_values; default 1): each series' floor counts at that share (`window_floor`).
    A NaN share (interval unseen) is asked of `resolve` (series ids -> shares; one index probe each)
    only for the series that could stand out at the least share there is (`share_lo`) and the solo
    ones; the others count at 1, which they would not pass either."""
    n_net = int(sc.net[pos].sum())
    grp = sc.grp[pos]
    med = _median_by(grp, cur)
    mad = 1.4826 * _median_by(grp, np.abs(cur - med))
    # two peers (a spine's two leaf ports): the MAD of a pair is half their gap, each one's own
    # deviation, so z was 0.67 however far one stood from the other; the floor alone says whether the
    # gap matters (finish_scores still asks the series' own history)
    mad[np.bincount(grp)[grp] == 2] = 0.0
    solo = sc.solo[pos]
    # a solo series' floor stays absolute: finish_scores scores it on its own level already
    rel = np.where(solo, 0.0, sc.floor_rel[pos]) if len(sc.floor_rel) else sc.floor_rel
    sh = np.ones(len(pos)) if shares is None else shares.share.copy()
    share_lo, resolve = (1.0, None) if shares is None else (shares.share_lo, shares.resolve)
    unseen = np.isnan(sh)
    if unseen.any():
        z_lo = (cur - med) / np.maximum(mad, level_floor(sc.floor[pos] * np.where(unseen, share_lo, sh), rel, med))
        could = np.flatnonzero(unseen & ~solo & (z_lo >= min_z))
        # no more than the `limit` that can come back: a short step in a job of 2-s collectors leaves
        # most series with one sample, and a probe each for all that pass at the least share cost
        # more than the window (4,096 ranks: 0.7 s a slow step)
        could = could[np.argsort(-z_lo[could], kind="stable")][:limit]
        ask = np.concatenate([could, np.flatnonzero(unseen & solo)])
        sh[unseen] = 1.0
        if resolve is not None and len(ask):
            sh[ask] = resolve(sc.ids[pos[ask]])
    floor = level_floor(sc.floor[pos] * sh, rel, med)
    z = (cur - med) / np.maximum(mad, floor)
    hit = np.flatnonzero(~solo & (z >= min_z))
    hit = hit[np.argsort(-z[hit], kind="stable")][:limit]
    alone = np.flatnonzero(solo)
    alone = alone[np.argsort(sc.ids[pos[alone]], kind="stable")][:limit]
    pick = np.concatenate([hit, alone])
    zz = z[pick]
    zz[len(hit) :] = np.nan
    return pd.DataFrame(
        {
            "series_id": sc.ids[pos[pick]],
            "cur": cur[pick],
            "peer_med": med[pick],
            "peer_mad": mad[pick],
            "peer_z": zz,
            "cur_w": cur_w[pick],
            "window_floor": floor[pick],
        }
    ), n_net
