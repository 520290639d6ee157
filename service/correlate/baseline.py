"""Robust per-job step-time baseline and slow-step detection (pure numpy over one job's steps).

One pass over the steps in order keeps a window of recent *healthy* steps (steps judged slow are
not let in, so a fault does not raise its own bar). Baseline = median, spread = 1.4826·MAD. Two
tests mark a step slow:

* per step: above `median + max(K·sigma, REL·median)` (a single +30% step is slow at once);
* sequential (`SeqParams`): a one-sided CUSUM of each step's log-likelihood ratio "shifted by
  `shift`" vs "at baseline" (capped per step, so one hiccup proves nothing). When the evidence of
  an excursion reaches `h`, the whole segment from its onset (where the evidence last was zero) to
  its peak is slow, retroactively. Its end is the peak: once the evidence has fallen `h_end` below
  the peak, the segment is closed and the steps after the peak are healthy again (a reverse test
  from the peak, so a plain CUSUM's slow drain does not flag the healthy steps after a fault).

Steps of an open excursion enter the window only once it is known not to be a fault. `slow` is the
answer with every step given (later steps can move an onset back or an end either way; the steps
of a proven segment whose end is not proven yet are slow); `live` is the answer each step had when
it was the newest. Checkpoint steps are a class of their own (legitimately
longer): they feed neither window nor CUSUM, and inside a proven segment they are slow when they
show half the shift. Change-point: a proven segment that lasts `CHANGE_RUN` steps (longer than any
fault we must report) and is flat becomes the job's new level; its steps stay reported.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from fabricscope.service.correlate.constants import (
    BOOTSTRAP_MAX_RATIO,
    BORDER_Z,
    CHANGE_HALF_AGREE,
    CHANGE_RUN,
    CHANGE_SIGMA_RATIO,
    CKPT_FIRST_MARGIN_S,
    CKPT_HISTORY,
    CKPT_MIN_HISTORY,
    CKPT_SPREAD_SHARE,
    DEFAULT_SEQ,
    EPISODE_GAP_STEPS,
    EPISODE_MIN_STEPS,
    FAINT_REL,
    FAINT_Z,
    K_SIGMA,
    MAD_SIGMA_SE,
    MAD_TO_SIGMA,
    MIN_HISTORY,
    MIN_SIGMA_REL,
    NEAR_SLOW_STEPS,
    NET_TIMING_SHARE,
    NET_TIMING_Z,
    REL,
    SEG_MEMBER_SIGMAS,
    WINDOW,
    SeqParams,
)

__all__ = ["CHANGE_RUN", "Baselines", "compute_baselines", "episodes", "time_lost", "work_lost"]


def time_lost(took: float, base: float) -> float:
    """Seconds `took` lost over its baseline `base`, >= 0 (0 when either is unknown)."""
    lost = float(took) - float(base)
    return lost if math.isfinite(lost) and lost > 0.0 else 0.0


def work_lost(took: float, base: float, transfer: float, base_transfer: float, waited: float = 0.0) -> float:
    """Seconds a step (`took`, baseline `base`) lost outside its collectives (`transfer`, baseline
    `base_transfer`), >= 0, and never under `waited`: what its ranks waited for a straggler past the
    next-slowest rank (decompose.straggler_loss). The split of the step time carries the other ranks'
    noise and can leave the work nothing while the ring also lost time (a PCIe downtrain's last step
    can lose less in all than its collectives alone, while its ranks waited most of that for the
    GPU); the ranks' own clocks measured the wait. Unknown transfer baseline: the step's loss."""
    if not math.isfinite(base_transfer):
        split = time_lost(took, base)
    else:
        split = max((took - transfer) - (base - base_transfer), 0.0)
    return max(split, waited)


@dataclass
class Baselines:
    base: np.ndarray  # step-time baseline per step (NaN while there is too little history)
    base_transfer: np.ndarray  # baseline of the pure collective transfer time
    threshold: np.ndarray  # per-step slow threshold
    slow: np.ndarray  # bool, final: with all the steps given
    live: np.ndarray  # bool, what each step got when it was the last one given
    # index of the first step of the sustained episode a slow step belongs to (-1: none): a run of
    # slow steps (gaps of up to EPISODE_GAP_STEPS allowed) that the sequential test took part in
    episode: np.ndarray
    # bool: slow by the per-step test alone (what the step shows by itself, without its neighbours)
    step_slow: np.ndarray
    # the healthy window's robust sigma and trimmed mean when each step was judged (NaN: too little history)
    sigma: np.ndarray
    centre: np.ndarray
    # the healthy window's robust sigma of the collectives' pure transfer time (NaN: no history)
    sigma_transfer: np.ndarray
    # bool: healthy by the timing alone but over it by `BORDER_Z` sigmas and REL: slow if the step's
    # own telemetry names a cause (engine.py: a corroborated step)
    borderline: np.ndarray
    # bool: the borderline steps only FAINT_Z sigmas and FAINT_REL over (under BORDER_Z or REL): their
    # telemetry must name a cause more surely (EngineConfig.corroborate_faint_confidence)
    faint: np.ndarray
    # bool: checkpoint steps over their own baseline but under the borderline margin (a checkpoint's
    # write varies more than the few tenths one slow host adds): slow only when one host's ranks wrote
    # their checkpoint slowly (their own timing) and that host's own telemetry shows it (engine.py)
    ckpt_faint: np.ndarray
    # bool: steps not over the bar's margins in total whose collectives' pure transfer time alone is
    # REL and NET_TIMING_Z of its own spread over its baseline (compute jitter, or a checkpoint
    # step's write, hid a network loss): slow only when their telemetry names a network cause (engine.py)
    net_only: np.ndarray
    # bool: the same of the ranks' median `data` phase (REL and NET_TIMING_Z of its own spread over its
    # baseline; not net_only): every rank's loader lost the time alike, as a shared volume makes it,
    # and the step's noise hid it. Slow only when their telemetry names a storage cause (engine.py)
    data_only: np.ndarray
    # bool: the collectives' pure transfer time over its baseline by NET_TIMING_Z of its own spread,
    # NET_TIMING_SHARE of the step's excess and FAINT_REL of the step: the step's own timing of a
    # network loss (engine.py: a network cause then counts as the step's own timing)
    net_timing: np.ndarray
    # bool: the same of the ranks' median `data` phase (the loader's read): the step's own timing of a
    # storage loss that every rank shares (a shared volume), which no straggler can show (engine.py: a
    # storage cause then counts as the step's own timing). All False when the job records no phases.
    data_timing: np.ndarray
    # bool: the borderline steps within NEAR_SLOW_STEPS of a slow step. A 5-10-s sample that covers a
    # fault's last (or first) seconds covers the healthy steps beside it too, and timing under the
    # bar cannot say which of them it was about: only the step's own rank timings (a straggler) can
    # corroborate such a step.
    near_slow: np.ndarray
    # the ranks' median `data` phase's healthy median and spread (MAD-sigma) per step: NaN without
    # history or phases (engine.py: a shared volume's loss named from the loaders' timing)
    data_base: np.ndarray | None = None
    data_sigma: np.ndarray | None = None

    @property
    def unproven(self) -> np.ndarray:
        """bool: slow steps the per-step test did not flag (the sequential test, or a segment's
        marking, made them slow): slow only as long as what they show of their own does not say
        otherwise (engine.py: an onset that names nothing, a network cause its collectives lack)."""
        return self.slow & ~self.step_slow

    def transfer_lost(self, i: int, transfer: float) -> float:
        """Seconds step `i`'s collectives (their pure `transfer` time) lost over their baseline, >= 0
        (0 when either is unknown)."""
        return time_lost(transfer, float(self.base_transfer[i]))

    @property
    def onset(self) -> np.ndarray:
        """bool: an episode's first step when the per-step test did not flag it: where the sequential
        test placed a shift's onset. The CUSUM puts it where its evidence last was zero, so a healthy
        step before a fault that ran a little long is folded in; such a step is slow only when its
        own telemetry names a cause (engine.py). Not a step after a gap inside an episode: a small
        fault's steps dip under the bar and back, and there the episode's cause is the step's."""
        return self.unproven & (self.episode == np.arange(len(self.slow)))


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


def history_margin(n: int) -> float:
    """The factor on a sigma read from `n` healthy steps for the slow bar: its upper one-standard-error
    bound over that of a full WINDOW (constants.MAD_SIGMA_SE); 1 from a full window on."""
    full = 1.0 + MAD_SIGMA_SE / math.sqrt(WINDOW)
    return max(1.0, (1.0 + MAD_SIGMA_SE / math.sqrt(max(n, 1))) / full)


def _without_warmup(hist: deque[int], duration: np.ndarray) -> None:
    """The bootstrap's steps less those over BOOTSTRAP_MAX_RATIO times their median. The first step
    seen is taken with nothing to compare it to, and when it is warm-up (step 0 compiles: 2.5x the
    rest) it stayed among the healthy steps for WINDOW steps: with few steps on the slow side, their
    median deviation (`_robust`'s sigma) moved up a whole rank and the bar with it (a job's
    sigma can read over twice its true value with it, and faults under the inflated bar then enter
    the window and keep it there)."""
    med = _median(duration[list(hist)])
    keep = [j for j in hist if duration[j] < BOOTSTRAP_MAX_RATIO * med]
    if len(keep) < len(hist):
        hist.clear()
        hist.extend(keep)


def _trimmed_mean(x: np.ndarray) -> float:
    """Mean of the middle 80%: the centre of a skewed window without its odd steps."""
    k = len(x) // 10
    return float(np.mean(np.sort(x)[k:len(x) - k]))


def _flat(x: np.ndarray, sigma: float) -> bool:
    """A settled new level: both halves agree and the spread is the job's usual one."""
    h = len(x) // 2
    m1, m2 = _median(x[:h]), _median(x[h:])
    return abs(m2 - m1) <= CHANGE_HALF_AGREE * m2 and _robust(x)[1] <= CHANGE_SIGMA_RATIO * sigma


def episodes(slow: np.ndarray, seq_marked: np.ndarray, gap: int = EPISODE_GAP_STEPS,
             min_steps: int = EPISODE_MIN_STEPS) -> np.ndarray:
    """Sustained episodes: maximal runs of slow steps (`gap` healthy steps allowed inside) that the
    sequential test took part in or that hold at least `min_steps` slow steps. Each slow step of such
    a run gets the run's first index, every other step -1. A checkpoint step slowed by a fault and
    the slightly slower steps after it (write-back) are one episode, so the steps that show little
    on their own can be explained by the step that shows it all (episode.py)."""
    out = np.full(len(slow), -1)
    idx = np.flatnonzero(slow)
    if not len(idx):
        return out
    cuts = np.flatnonzero(np.diff(idx) > gap + 1) + 1
    for run in np.split(idx, cuts):
        if len(run) >= min_steps or seq_marked[run].any():
            out[run] = run[0]
    return out


def _checkpoints_in_faults(slow: np.ndarray, is_ckpt: np.ndarray, ck_x: np.ndarray, calm: np.ndarray,
                          seq: SeqParams) -> None:
    """A checkpoint step next to a slow step (the one before or after it) is slow when it runs
    `ckpt_next_to_slow` over its own baseline: a fault that spans it or ends with it adds to it as to
    any step, but its own bar is wide (checkpoint writes vary), so alone it would read healthy. Only
    in a job no noisier than `max_noise` (`calm`, per step): in a job whose steps vary 20 %, 5 % says
    nothing."""
    plain = np.flatnonzero(~is_ckpt)
    for i in np.flatnonzero(is_ckpt & ~slow):
        k = int(np.searchsorted(plain, i))
        near = [plain[j] for j in (k - 1, k) if 0 <= j < len(plain) and slow[plain[j]] and calm[plain[j]]]
        slow[i] = bool(near) and ck_x[i] > seq.ckpt_next_to_slow


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
    out = seg.steps[:k]
    del seg.steps[:k], seg.x[:k], seg.ev[:k], seg.loud[:k]
    seg.onset = seg.steps[0]
    return out


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
    cut = quiet[kk]  # the higher part's first quiet step
    out = seg.steps[:cut]
    del seg.steps[:cut], seg.x[:cut], seg.ev[:cut], seg.loud[:cut]
    seg.onset = seg.steps[0]
    return out


def _other_fault(seg: _Segment, x: float, seq: SeqParams) -> bool:
    """Whether a flagged step with excess `x` is another fault's inside excursion `seg`: it runs
    SeqParams.other_fault_ratio times the level of the excursion's quiet steps (their median excess,
    at least the design shift), once there are other_fault_quiet of them to tell a level."""
    quiet = [v for v, loud in zip(seg.x, seg.loud, strict=True) if not loud]
    if not seq.other_fault_ratio or len(quiet) < seq.other_fault_quiet:
        return False
    return x >= seq.other_fault_ratio * max(_median(quiet), seq.shift)


def compute_baselines(duration: np.ndarray, transfer: np.ndarray, is_ckpt: np.ndarray,
                      ckpt_med: np.ndarray, seq: SeqParams = DEFAULT_SEQ, data: np.ndarray | None = None,
                      ckpt_max: np.ndarray | None = None) -> Baselines:
    """`duration`: job step time (median over ranks); `transfer`: sum over collectives of the
    shortest rank's duration (pure transfer, no waiting); `ckpt_med`: median checkpoint phase;
    `data`: median `data` phase (NaN or None: not recorded); `ckpt_max`: the slowest rank's
    checkpoint phase (None: `ckpt_med`), what every rank waits for at the barrier after it."""
    n = len(duration)
    if ckpt_max is None:
        ckpt_max = ckpt_med
    if np.count_nonzero(~is_ckpt) < MIN_HISTORY <= np.count_nonzero(is_ckpt):
        # a job that writes a checkpoint at (nearly) every step: the write is part of its step, and
        # with no plain steps to learn a baseline from, none would ever be judged (the lab's job with
        # a checkpoint every step: a 3-s link flap was not slow)
        is_ckpt = np.zeros(n, bool)
    if data is None:
        data = np.full(n, np.nan)
    raw_data_ok = np.isfinite(data)
    has_data = bool(raw_data_ok.any())  # a job that records no phases: no window statistics to take
    data = np.where(raw_data_ok, data, 0.0)
    base_d = np.full(n, np.nan)
    sig_d = np.full(n, np.nan)
    base = np.full(n, np.nan)
    base_t = np.full(n, np.nan)
    thr = np.full(n, np.nan)
    sig = np.full(n, np.nan)
    sig_t = np.full(n, np.nan)
    centre = np.full(n, np.nan)
    plain = np.full(n, np.nan)  # a checkpoint step's plain-step median, the base its write adds to
    slow = np.zeros(n, bool)
    live = np.zeros(n, bool)
    ck_x = np.zeros(n)  # checkpoint steps' relative excess over their own baseline
    ck_near = np.zeros(n, bool)  # checkpoint steps over their baseline by a borderline margin
    ck_clear = np.zeros(n, bool)  # ...by its noise part (not REL): clear of the step's and the write's noise
    ck_over = np.zeros(n, bool)  # ...by a faint one (FAINT_REL)
    raw_transfer_ok = np.isfinite(transfer)
    transfer = np.where(raw_transfer_ok, transfer, 0.0)
    hist: deque[int] = deque(maxlen=WINDOW)  # indices of healthy steps
    hist_ck: deque[float] = deque(maxlen=CKPT_HISTORY)  # checkpoint extra over the normal baseline
    seg = _Segment()
    prev = -1  # the last step judged by the per-step test (not a checkpoint step)

    def admit(steps: list[int]) -> None:
        hist.extend(j for j in steps if not slow[j])

    def mark(lo: int, hi: int, now: int) -> None:
        """Proven segment [lo, hi]: slow, and checkpoint steps in it (or right after its last step,
        which is never a checkpoint step) when they show half the shift; one right after it also
        clear of its noise (the step's and the write's: ck_clear), as the fault may have ended
        before it and a checkpoint's write varies more than a plain step."""
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
            slow[j] = slow[j] or (np.isfinite(duration[j]) and (not is_ckpt[j] or ck_x[j] > seq.shift / 2))
        j = hi + 1
        while j <= now and is_ckpt[j]:
            slow[j] = slow[j] or (ck_x[j] > seq.shift / 2 and ck_clear[j])
            j += 1
        seg.marked = max(seg.marked, hi)

    for i in range(n):
        d = float(duration[i])
        if not np.isfinite(d):
            continue
        if len(hist) < MIN_HISTORY:
            # bootstrap: take steps that are not wildly off the few seen (step 0 compiles)
            if not is_ckpt[i] and (not hist or d < BOOTSTRAP_MAX_RATIO * _median(duration[list(hist)])):
                hist.append(i)
                if len(hist) == MIN_HISTORY:
                    _without_warmup(hist, duration)
            continue
        idx = np.fromiter(hist, int, len(hist))
        med, sigma = _robust(duration[idx])
        med_t, sig_t[i] = _robust(transfer[idx])
        if has_data:
            base_d[i], sig_d[i] = _robust(data[idx])
        if is_ckpt[i]:
            enough = len(hist_ck) >= CKPT_MIN_HISTORY
            extra = _median(hist_ck) if enough else float(ckpt_med[i]) + CKPT_FIRST_MARGIN_S
            b = med + extra
            plain[i] = med
            t = b + max(K_SIGMA * sigma + CKPT_SPREAD_SHARE * extra, REL * b)
            ck_x[i] = (d - b) / med
            slow[i] = d > t
            sig[i] = sigma
            # over its noise as a plain step's borderline, with the checkpoint's own spread on top
            ck_clear[i] = d - b >= BORDER_Z * sigma + CKPT_SPREAD_SHARE * extra
            ck_near[i] = ck_clear[i] and d - b >= REL * b
            ck_over[i] = d - b >= FAINT_REL * b
            # inside an open proven segment it carries the shift too (final once the end is known)
            live[i] = slow[i] or (seg.proven and ck_x[i] > seq.shift / 2)
            if not live[i] and not ck_over[i] and seg.onset < 0:
                # not while an excursion is open: a long fault's checkpoint steps, under half its
                # shift by the extra its earlier checkpoint steps taught, would make it the norm;
                # nor a borderline or faint one: a slow write that only checkpoint steps show is
                # never an excursion, and its first steps (borderline, then corroborated) would teach
                # it (a slow checkpoint volume's faint steps, once learned, put its next steps under
                # FAINT_REL)
                hist_ck.append(d - med)
            base[i], base_t[i], thr[i] = b, med_t, t
            continue
        b = med
        t = b + max(K_SIGMA * sigma * history_margin(len(idx)), REL * b)
        slow[i] = d > t
        base[i], base_t[i], thr[i] = b, med_t, t
        sig[i], centre[i] = sigma, _trimmed_mean(duration[idx])
        noisy = sigma > seq.max_noise * b
        if seq.enabled and seq.pair_z and prev >= 0 and not noisy:
            # two steps in a row both well over the noise: a short fault (2-3 steps of +10-15 %) that
            # neither the per-step threshold (one hiccup must not do) nor the CUSUM (needs h / cap
            # steps) can prove alone
            xi, xp = d - centre[i], duration[prev] - centre[prev]
            if (xi >= max(seq.pair_z * sigma, seq.pair_min * b)
                    and xp >= max(seq.pair_z * sig[prev], seq.pair_min * base[prev])):
                slow[i] = True
                if not slow[prev]:
                    slow[prev] = True
                    if prev in hist:
                        hist.remove(prev)
        prev = i
        if noisy and seg.onset >= 0:
            admit(seg.steps)  # the job became too noisy to judge a small shift: no open excursion
            seg.reset()
        if not seq.enabled or len(hist) < seq.min_history or noisy:
            if not slow[i]:
                hist.append(i)
            live[i] = slow[i]
            continue
        # -- sequential evidence ------------------------------------------------------------------
        # measured from the window's trimmed mean, not its median: a synchronous step ends with its
        # slowest rank, so step times are skewed right and most steps sit above the median
        x, s_rel = (d - _trimmed_mean(duration[idx])) / b, sigma / b
        # tuned to the smallest shift that matters (5%), or in a noisy job to `shift_sigmas` of its
        # noise: a fixed 5% design gains ~nothing per step from a +100% step when sigma is 30%
        delta = max(seq.shift, seq.shift_sigmas * s_rel)
        if seq.adaptive and seg.x:
            # an open excursion is tested against its own level once that is above the design
            # shift: a step back at the baseline after +40 % steps is not "a 5 % shift, maybe",
            # it ends the excursion (adaptive CUSUM)
            delta = max(delta, _median(seg.x))
        llr = delta * (x - delta / 2) / (s_rel * s_rel)
        if seq.reset_after_loud and seg.onset >= 0 and not slow[i] and llr <= 0 and not seg.quiet_for:
            # the excursion so far is steps the per-step test flagged already, and the first step
            # after them is back at the baseline: a large fault, not a small shift; start afresh
            seg.reset()
        if not slow[i] and llr > 0:
            seg.quiet_for += 1
        if slow[i] and _other_fault(seg, x, seq):
            llr = 0.0
        seg.s = max(0.0, seg.s + min(max(llr, -seq.cap), seq.cap))
        if seg.s <= 0.0:
            admit(seg.steps)  # the excursion was noise: its steps were healthy after all
            if not slow[i]:
                hist.append(i)
            seg.reset()
            live[i] = slow[i]
            continue
        if seg.onset < 0:
            seg.onset, seg.sigma, seg.srel = i, sigma, s_rel
        seg.steps.append(i)
        seg.x.append(x)
        seg.ev.append(seg.s)
        seg.loud.append(bool(slow[i]))
        if seg.s > seg.peak_s:
            seg.peak_s, seg.peak = seg.s, i
        if not seg.proven and seg.peak_s >= seq.h:
            upto = [x for j, x in zip(seg.steps, seg.x, strict=True) if j <= seg.peak]
            # ...at least min_mean, or short of it by no more than min_mean_se standard errors of
            # the segment's mean: a +4.8 % fault in 1.5 % noise measured +3.9 % over its 9 steps
            need = seq.min_mean - seq.min_mean_se * seg.srel / np.sqrt(max(len(upto), 1))
            seg.proven = bool(upto) and float(np.mean(upto)) >= need
            if seg.proven and seq.split_quiet_prefix:
                admit(_quiet_prefix(seg, seq))
            if seg.proven:
                admit(_drift_prefix(seg, seq))
        if not seg.proven:
            if seq.end_unproven and seg.peak_s - seg.s >= seq.h_end:
                # ended before it was proven: its own evidence fell short, and a later excursion
                # must not inherit it (it marked the healthy steps between two faults slow). Its
                # steps join the window, unless it all but proved a shift (half the evidence, its
                # steps REL over on average): a fault that ended just short of proof (a +6 % fault
                # of 19 steps in 3.6 % noise reached 15.5 of 16) is not the job's noise, and in the
                # window it would raise the bar that every later fault is judged by
                near = seg.peak_s >= seq.h / 2 and _median(seg.x[:seg.steps.index(seg.peak) + 1]) >= seq.min_mean
                admit([j for j in seg.steps if j > seg.peak] if near else seg.steps)
                seg.reset()
                live[i] = slow[i]
                continue
            if len(seg.steps) > WINDOW:  # a long unproven drift: let its oldest steps in
                admit(seg.steps[:1])
                del seg.steps[0], seg.x[0], seg.ev[0], seg.loud[0]
                seg.onset = seg.steps[0]
            live[i] = slow[i]
            continue
        if seg.peak_s - seg.s >= seq.h_end:
            # ended at its peak: the steps after it are healthy (the peak may have been this step's
            # predecessor, so they can be few); the CUSUM starts afresh
            mark(seg.onset, seg.peak, i)
            admit([j for j in seg.steps if j > seg.peak])
            seg.reset()
            live[i] = slow[i]
            continue
        live[i] = True
        if i - seg.onset + 1 >= CHANGE_RUN and _flat(np.array([duration[j] for j in seg.steps]), seg.sigma):
            mark(seg.onset, i, i)  # a new level: its steps stay reported, later ones are judged by it
            hist.clear()
            hist.extend(seg.steps[-WINDOW:])
            seg.reset()
            continue
        mark(seg.onset, seg.peak, i)
    if seg.proven:
        # still open: its end is not proven yet, so the steps since its peak are slow for now (a
        # fault's step under the noise must not read healthy mid-fault); later steps decide
        mark(seg.onset, n - 1, n - 1)
    # steps judged in a job calm enough for the multi-step tests (`max_noise`, as `noisy` above)
    with np.errstate(invalid="ignore"):
        calm = (sig <= seq.max_noise * base) & seq.enabled
    if seq.ckpt_next_to_slow:
        _checkpoints_in_faults(slow, is_ckpt, ck_x, calm, seq)
    step_slow = np.zeros(n, bool)
    ok = np.isfinite(thr) & np.isfinite(duration)
    step_slow[ok] = duration[ok] > thr[ok]
    over = duration - centre
    with np.errstate(invalid="ignore"):
        near = ~slow & ~is_ckpt & calm & np.isfinite(over)
        border = near & (over >= BORDER_Z * sig) & (over >= REL * base)
        faint = near & ~border & (over >= FAINT_Z * sig) & (over >= FAINT_REL * base)
        ck_faint = ck_over & ~ck_near & ~slow & calm
        border |= (ck_near | ck_faint) & ~slow & calm
        # the collectives alone lost REL of the step to the network, whatever the rest of it did
        # ...or the ranks' median data phase alone (every loader, as a shared volume makes it)
        x_net = np.where(raw_transfer_ok, transfer - base_t, np.nan)
        x_data = np.where(raw_data_ok, data - base_d, np.nan)
        # checkpoint steps too: the write is a phase of its own, and a fault's collectives or loaders
        # lose their time at a checkpoint step as at any other, hidden there by the write's spread
        unjudged = ~slow & calm & ~border & ~faint
        net_only = unjudged & _phase_lost(x_net, sig_t, base)
        data_only = unjudged & ~net_only & _phase_lost(x_data, sig_d, base)
        # a checkpoint step's excess is what it took beyond a plain step and its slowest write (the
        # barrier waits for that writer): a 2-s network stall at its barrier with the loaders a few
        # ms slow is not the loaders' loss (else a link flap during a checkpoint step's barrier names
        # the shared dataset volume from its loaders' timing alone)
        over = np.where(is_ckpt, duration - plain - np.nan_to_num(ckpt_max), duration - centre)
        net_timing = _own_timing(x_net, sig_t, over, base)
        data_timing = _own_timing(x_data, sig_d, over, base)
    near_slow = np.zeros(n, bool)
    for k in range(1, NEAR_SLOW_STEPS + 1):
        near_slow[k:] |= slow[:-k]
        near_slow[:-k] |= slow[k:]
    judged = border | faint | net_only | data_only
    return Baselines(base, base_t, thr, slow, live, episodes(slow, slow & ~step_slow), step_slow, sig, centre,
                     sig_t, judged, faint, ck_faint, net_only, data_only, net_timing, data_timing,
                     judged & near_slow, base_d, sig_d)


def _phase_lost(x: np.ndarray, spread: np.ndarray, base: np.ndarray) -> np.ndarray:
    """A phase of the step (`x`: its excess over the healthy window's median) lost REL of the step
    and NET_TIMING_Z of its own `spread` by itself, whatever the rest of the step did."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(x) & (x >= np.maximum(NET_TIMING_Z * spread, REL * base))


def _own_timing(x: np.ndarray, spread: np.ndarray, over: np.ndarray, base: np.ndarray) -> np.ndarray:
    """A phase of the step (`x`: its excess over the healthy window's median) lost the time itself: by
    NET_TIMING_Z of its own `spread`, NET_TIMING_SHARE of the step's excess `over` and FAINT_REL of
    the step. fmax: a step without history (NaN `over`) still counts its phase."""
    with np.errstate(invalid="ignore"):
        return (x > 0) & (x >= np.fmax.reduce([NET_TIMING_Z * spread, NET_TIMING_SHARE * over, FAINT_REL * base]))
