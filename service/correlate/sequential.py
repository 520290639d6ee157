"""The sequential test of baseline.py's pass over a job's steps, and the robust statistics both use.

A one-sided CUSUM of each plain step's log-likelihood ratio "shifted by `shift`" vs "at baseline"
(SeqParams; capped per step, so one hiccup proves nothing). When the evidence of an excursion
reaches `h`, the whole segment from its onset (where the evidence last was zero) to its peak is
slow, retroactively; once the evidence has fallen `h_end` below the peak the segment is closed and
the steps after the peak are healthy again. A proven segment that lasts `CHANGE_RUN` steps and is
flat becomes the job's new level. baseline.py's module docstring has the whole picture.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from fabricscope.service.correlate.constants import (
    CHANGE_HALF_AGREE,
    CHANGE_RUN,
    CHANGE_SIGMA_RATIO,
    MAD_TO_SIGMA,
    MIN_SIGMA_REL,
    REL,
    SEG_MEMBER_SIGMAS,
    WINDOW,
    SeqParams,
)


def _median(x: Iterable[float] | np.ndarray) -> float:
    """np.median of a 1-d sequence, to the bit (the middle value, or the mean of the two middle ones
    as np.mean computes it: (a + b) / 2; NaN when any value is NaN or there is none), without its
    generic machinery: compute_baselines takes ~120 medians of short windows per call, and np.median's
    ~25 us each were most of its time."""
    v = np.sort(np.asarray(x, dtype=float).ravel())
    n = len(v)
    if n == 0 or v[-1] != v[-1]:  # np.sort puts NaN last
        return float("nan")
    h = n // 2
    return float(v[h]) if n % 2 else float((v[h - 1] + v[h]) / 2)


def _robust(x: np.ndarray) -> tuple[float, float]:
    """Median and sigma: 1.4826·MAD, or the same scale of the slow side alone when that is wider.
    A synchronous step ends with its slowest rank, so step times are skewed right and a symmetric
    MAD understates the spread that matters for "slow" (Gumbel-like noise: ~3x more false slow
    steps at 6 sigma); for symmetric noise both are the same."""
    med = _median(x)
    dev = x - med
    up = dev[dev > 0]
    mad = _median(np.abs(dev))
    if len(up):
        mad = max(mad, _median(up))
    return med, max(MAD_TO_SIGMA * mad, MIN_SIGMA_REL * abs(med))


def _trimmed_mean(x: np.ndarray) -> float:
    """Mean of the middle 80%: the centre of a skewed window without its odd steps."""
    k = len(x) // 10
    return float(np.mean(np.sort(x)[k : len(x) - k]))


def _flat(x: np.ndarray, sigma: float) -> bool:
    """A settled new level: both halves agree and the spread is the job's usual one."""
    h = len(x) // 2
    m1, m2 = _median(x[:h]), _median(x[h:])
    return abs(m2 - m1) <= CHANGE_HALF_AGREE * m2 and _robust(x)[1] <= CHANGE_SIGMA_RATIO * sigma


class _Segment:
    """The CUSUM's current excursion: evidence, onset, peak and the steps held back from the window."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.s = self.peak_s = 0.0
        self.onset = self.peak = -1
        self.proven = False
        self.marked = -1  # steps up to here are marked slow already
        self.sigma = 0.0  # healthy sigma when it began
        self.srel = 0.0  # ...relative to the baseline
        self.quiet_for = 0  # steps under the per-step threshold that added evidence
        self.steps: list[int] = []  # non-checkpoint steps since onset
        self.x: list[float] = []  # their relative excess over the baseline
        self.ev: list[float] = []  # the evidence after each of them
        self.loud: list[bool] = []  # whether the per-step test (or the pair test) found it slow

    def add(self, i: int, x: float, loud: bool, sigma: float, s_rel: float) -> None:
        """Step `i` (relative excess `x`, healthy `sigma` and `s_rel` when judged) joins the excursion
        with the evidence it is at now."""
        if self.onset < 0:
            self.onset, self.sigma, self.srel = i, sigma, s_rel
        self.steps.append(i)
        self.x.append(x)
        self.ev.append(self.s)
        self.loud.append(loud)
        if self.s > self.peak_s:
            self.peak_s, self.peak = self.s, i

    def drop_first(self, k: int) -> list[int]:
        """The first `k` steps leave the excursion, which then begins at the next one; returns them."""
        out = self.steps[:k]
        del self.steps[:k], self.x[:k], self.ev[:k], self.loud[:k]
        self.onset = self.steps[0]
        return out


def _quiet_prefix(seg: _Segment, seq: SeqParams) -> list[int]:
    """At the proof of `seg`: when loud steps proved it, and its quiet steps before the first loud
    one were unproven (evidence under `h`) and fell by `cap` from their peak before it, those steps
    up to the last one the fall reached (SeqParams.split_quiet_prefix) leave the segment; it starts
    at the first loud step then. Returns the steps that left (healthy: they are let into the window)."""
    k = next((n for n, loud in enumerate(seg.loud) if loud), 0)
    if k == 0:
        return []
    pre = seg.ev[:k]
    top = int(np.argmax(pre))
    if pre[top] >= seq.h or pre[top] - min(pre[top:]) < seq.cap:
        return []
    return seg.drop_first(k)


def _drift_prefix(seg: _Segment, seq: SeqParams) -> list[int]:
    """At the proof of `seg`: its quiet steps (those the per-step test did not flag) split at the point
    that best parts a lower level from a higher one (the largest between-parts statistic k(n-k)/n
    (m2-m1)^2). When the higher part is `drift_split_z` standard errors over the lower, and the lower
    part would not be proven on its own terms (its mean short of min_mean by more than min_mean_se of
    its standard errors), the segment's steps before the higher part leave it
    (SeqParams.drift_split_z): they were the job's noise, and the shift began where the level rose.
    A flagged step among them stays slow on its own (a one-step slow write inside a small wander that
    a later fault proves with it: the flagged step's level is its own, not the wander's). Returns the
    steps that left."""
    quiet = [k for k, loud in enumerate(seg.loud) if not loud]
    n = len(quiet)
    if n < 3 or not seq.drift_split_z:
        return []
    x = np.asarray(seg.x, float)[quiet]
    k = np.arange(1, n)
    head = np.cumsum(x)[:-1]
    m1, m2 = head / k, (x.sum() - head) / (n - k)
    stat = np.where(m2 > m1, k * (n - k) / n * (m2 - m1) ** 2, -np.inf)
    j = int(np.argmax(stat))
    kk = j + 1
    if not np.isfinite(stat[j]):
        return []
    if m2[j] - m1[j] < seq.drift_split_z * seg.srel * np.sqrt(1.0 / kk + 1.0 / (n - kk)):
        return []
    if m1[j] >= seq.min_mean - seq.min_mean_se * seg.srel / np.sqrt(kk):
        return []
    return seg.drop_first(quiet[kk])  # up to the higher part's first quiet step


def _other_fault(seg: _Segment, x: float, seq: SeqParams) -> bool:
    """Whether a flagged step with excess `x` is another fault's inside excursion `seg`: it runs
    SeqParams.other_fault_ratio times the level of the excursion's quiet steps (their median excess,
    at least the design shift), once there are other_fault_quiet of them to tell a level."""
    quiet = [v for v, loud in zip(seg.x, seg.loud, strict=True) if not loud]
    if not seq.other_fault_ratio or len(quiet) < seq.other_fault_quiet:
        return False
    return x >= seq.other_fault_ratio * max(_median(quiet), seq.shift)


@dataclass
class Cusum:
    """The sequential test over a job's plain steps. It shares the pass's healthy window (`hist`) and
    slow flags: steps of an open excursion enter the window only once it is known not to be a fault,
    and a proven segment's steps are marked slow retroactively."""

    duration: np.ndarray
    is_ckpt: np.ndarray
    slow: np.ndarray  # bool per step, marked here retroactively
    ck_x: np.ndarray  # checkpoint steps' relative excess over their own baseline
    ck_clear: np.ndarray  # checkpoint steps clear of the step's and the write's noise
    hist: deque[int]  # indices of healthy steps
    seq: SeqParams
    seg: _Segment = field(default_factory=_Segment)

    def admit(self, steps: list[int]) -> None:
        self.hist.extend(j for j in steps if not self.slow[j])

    def abandon(self) -> None:
        """The job became too noisy to judge a small shift: no open excursion."""
        self.admit(self.seg.steps)
        self.seg.reset()

    def mark(self, lo: int, hi: int, now: int) -> None:
        """Proven segment [lo, hi]: slow, and checkpoint steps in it (or right after its last step,
        which is never a checkpoint step) when they show half the shift; one right after it also
        clear of its noise (the step's and the write's: ck_clear), as the fault may have ended
        before it and a checkpoint's write varies more than a plain step."""
        seg, seq, slow, ck_x = self.seg, self.seq, self.slow, self.ck_x
        # A step far under the segment's own level is not part of it: after a large fault the
        # evidence drains over a few healthy steps, and a second fault starting within them would
        # otherwise carry those steps along. Only a level well clear of the noise can say so: for
        # a small shift the cut is under the baseline and every step of the segment stays slow.
        xs = dict(zip(seg.steps, seg.x, strict=True))
        level = _median([x for j, x in xs.items() if lo <= j <= hi] or [0.0])
        # ...and never above REL: a step that ran 4 % slow (the fault's last, partly covered step)
        # lost real time whatever the segment's level
        cut = min(level / 2 - SEG_MEMBER_SIGMAS * seg.srel, REL)
        while lo < hi and xs.get(lo, np.inf) < seq.onset_min and not slow[lo]:
            lo += 1
        for j in range(max(lo, seg.marked + 1), hi + 1):
            if xs.get(j, np.inf) < cut:
                continue
            slow[j] = slow[j] or (np.isfinite(self.duration[j]) and (not self.is_ckpt[j] or ck_x[j] > seq.shift / 2))
        j = hi + 1
        while j <= now and self.is_ckpt[j]:
            slow[j] = slow[j] or (ck_x[j] > seq.shift / 2 and self.ck_clear[j])
            j += 1
        seg.marked = max(seg.marked, hi)

    def step(self, i: int, d: float, b: float, sigma: float, window: np.ndarray) -> bool:
        """Plain step `i` (duration `d`) adds its evidence; `window`: the healthy steps it was judged
        by, `b` and `sigma` their median and robust sigma. Returns the answer it gets as the newest."""
        seg, seq = self.seg, self.seq
        x, s_rel, llr = self._evidence(i, d, b, sigma, window)
        seg.s = max(0.0, seg.s + min(max(llr, -seq.cap), seq.cap))
        if seg.s <= 0.0:
            self.admit(seg.steps)  # the excursion was noise: its steps were healthy after all
            if not self.slow[i]:
                self.hist.append(i)
            seg.reset()
            return bool(self.slow[i])
        seg.add(i, x, bool(self.slow[i]), sigma, s_rel)
        if not seg.proven and seg.peak_s >= seq.h:
            self._prove()
        if not seg.proven:
            self._unproven()
            return bool(self.slow[i])
        return self._proven(i)

    def _evidence(self, i: int, d: float, b: float, sigma: float, window: np.ndarray) -> tuple[float, float, float]:
        """Step `i`'s relative excess, the window's relative sigma, and its log-likelihood ratio."""
        seg, seq = self.seg, self.seq
        # measured from the window's trimmed mean, not its median: a synchronous step ends with its
        # slowest rank, so step times are skewed right and most steps sit above the median
        x, s_rel = (d - _trimmed_mean(self.duration[window])) / b, sigma / b
        # tuned to the smallest shift that matters (5%), or in a noisy job to `shift_sigmas` of its
        # noise: a fixed 5% design gains ~nothing per step from a +100% step when sigma is 30%
        delta = max(seq.shift, seq.shift_sigmas * s_rel)
        if seq.adaptive and seg.x:
            # an open excursion is tested against its own level once that is above the design
            # shift: a step back at the baseline after +40 % steps is not "a 5 % shift, maybe",
            # it ends the excursion (adaptive CUSUM)
            delta = max(delta, _median(seg.x))
        llr = delta * (x - delta / 2) / (s_rel * s_rel)
        if seq.reset_after_loud and seg.onset >= 0 and not self.slow[i] and llr <= 0 and not seg.quiet_for:
            # the excursion so far is steps the per-step test flagged already, and the first step
            # after them is back at the baseline: a large fault, not a small shift; start afresh
            seg.reset()
        if not self.slow[i] and llr > 0:
            seg.quiet_for += 1
        if self.slow[i] and _other_fault(seg, x, seq):
            llr = 0.0
        return x, s_rel, llr

    def _prove(self) -> None:
        """The evidence reached `h`: the excursion is proven when its steps up to the peak average
        enough."""
        seg, seq = self.seg, self.seq
        upto = [x for j, x in zip(seg.steps, seg.x, strict=True) if j <= seg.peak]
        # ...at least min_mean, or short of it by no more than min_mean_se standard errors of
        # the segment's mean: a +4.8 % fault in 1.5 % noise measured +3.9 % over its 9 steps
        need = seq.min_mean - seq.min_mean_se * seg.srel / np.sqrt(max(len(upto), 1))
        seg.proven = bool(upto) and float(np.mean(upto)) >= need
        if seg.proven and seq.split_quiet_prefix:
            self.admit(_quiet_prefix(seg, seq))
        if seg.proven:
            self.admit(_drift_prefix(seg, seq))

    def _unproven(self) -> None:
        """An excursion not proven yet: over once its evidence has fallen `h_end`; a long drift lets
        its oldest step into the window."""
        seg, seq = self.seg, self.seq
        if seq.end_unproven and seg.peak_s - seg.s >= seq.h_end:
            # ended before it was proven: its own evidence fell short, and a later excursion
            # must not inherit it (it marked the healthy steps between two faults slow). Its
            # steps join the window, unless it all but proved a shift (half the evidence, its
            # steps REL over on average): a fault that ended just short of proof (a +6 % fault
            # of 19 steps in 3.6 % noise reached 15.5 of 16) is not the job's noise, and in the
            # window it would raise the bar that every later fault is judged by
            near = seg.peak_s >= seq.h / 2 and _median(seg.x[: seg.steps.index(seg.peak) + 1]) >= seq.min_mean
            self.admit([j for j in seg.steps if j > seg.peak] if near else seg.steps)
            seg.reset()
            return
        if len(seg.steps) > WINDOW:  # a long unproven drift: let its oldest steps in
            self.admit(seg.drop_first(1))

    def _proven(self, i: int) -> bool:
        """A proven excursion after plain step `i`: ended at its peak, a new level, or still open.
        Returns step `i`'s live answer."""
        seg = self.seg
        if seg.peak_s - seg.s >= self.seq.h_end:
            # ended at its peak: the steps after it are healthy (the peak may have been this step's
            # predecessor, so they can be few); the CUSUM starts afresh
            self.mark(seg.onset, seg.peak, i)
            self.admit([j for j in seg.steps if j > seg.peak])
            seg.reset()
            return bool(self.slow[i])
        if i - seg.onset + 1 >= CHANGE_RUN and _flat(np.array([self.duration[j] for j in seg.steps]), seg.sigma):
            self.mark(seg.onset, i, i)  # a new level: its steps stay reported, later ones are judged by it
            self.hist.clear()
            self.hist.extend(seg.steps[-WINDOW:])
            seg.reset()
            return True
        self.mark(seg.onset, seg.peak, i)
        return True

    def finish(self) -> None:
        """After the last step: a proven excursion still open is slow to the end."""
        if self.seg.proven:
            # still open: its end is not proven yet, so the steps since its peak are slow for now (a
            # fault's step under the noise must not read healthy mid-fault); later steps decide
            last = len(self.duration) - 1
            self.mark(self.seg.onset, last, last)
