"""Robust per-job step-time baseline and slow-step detection (pure numpy over one job's steps).

One pass over the steps in order keeps a window of recent *healthy* steps (steps judged slow are
not let in, so a fault does not raise its own bar). Baseline = median, spread = 1.4826·MAD. Two
tests mark a step slow:

* per step: above `median + max(K·sigma, REL·median)` (a single +30% step is slow at once);
* sequential (`SeqParams`, sequential.py): a one-sided CUSUM of each step's log-likelihood ratio
  "shifted by `shift`" vs "at baseline" (capped per step, so one hiccup proves nothing). When the
  evidence of an excursion reaches `h`, the whole segment from its onset (where the evidence last
  was zero) to its peak is slow, retroactively. Its end is the peak: once the evidence has fallen
  `h_end` below the peak, the segment is closed and the steps after the peak are healthy again (a
  reverse test from the peak, so a plain CUSUM's slow drain does not flag the healthy steps after a
  fault).

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
from dataclasses import dataclass

import numpy as np

from fabricscope.service.correlate.constants import (
    BOOTSTRAP_MAX_RATIO,
    BORDER_Z,
    CHANGE_RUN,
    CKPT_HISTORY,
    CKPT_SPREAD_SHARE,
    DEFAULT_SEQ,
    EPISODE_GAP_STEPS,
    EPISODE_MIN_STEPS,
    FAINT_REL,
    FAINT_Z,
    K_SIGMA,
    MAD_SIGMA_SE,
    MIN_EXCESS_S,
    MIN_HISTORY,
    NEAR_SLOW_STEPS,
    NET_TIMING_SHARE,
    NET_TIMING_Z,
    REL,
    WINDOW,
    SeqParams,
)
from fabricscope.service.correlate.sequential import Cusum, _median, _robust, _trimmed_mean

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


def episodes(
    slow: np.ndarray, seq_marked: np.ndarray, gap: int = EPISODE_GAP_STEPS, min_steps: int = EPISODE_MIN_STEPS
) -> np.ndarray:
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


def _checkpoints_in_faults(
    slow: np.ndarray, is_ckpt: np.ndarray, ck_x: np.ndarray, calm: np.ndarray, seq: SeqParams
) -> None:
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


class _Pass:
    """compute_baselines' one pass over a job's steps in order: its inputs, the healthy window, and
    what each step got when it was judged."""

    def __init__(
        self,
        duration: np.ndarray,
        transfer: np.ndarray,
        data: np.ndarray,
        is_ckpt: np.ndarray,
        ckpt_med: np.ndarray,
        seq: SeqParams,
        has_data: bool,
    ) -> None:
        n = len(duration)
        self.duration, self.transfer, self.data = duration, transfer, data
        self.is_ckpt, self.ckpt_med, self.seq = is_ckpt, ckpt_med, seq
        self.has_data = has_data  # a job that records no phases: no window statistics to take
        self.base_d = np.full(n, np.nan)
        self.sig_d = np.full(n, np.nan)
        self.base = np.full(n, np.nan)
        self.base_t = np.full(n, np.nan)
        self.thr = np.full(n, np.nan)
        self.sig = np.full(n, np.nan)
        self.sig_t = np.full(n, np.nan)
        self.centre = np.full(n, np.nan)
        self.plain = np.full(n, np.nan)  # a checkpoint step's plain-step median, the base its write adds to
        self.slow = np.zeros(n, bool)
        self.live = np.zeros(n, bool)
        self.ck_x = np.zeros(n)  # checkpoint steps' relative excess over their own baseline
        self.ck_near = np.zeros(n, bool)  # checkpoint steps over their baseline by a borderline margin
        # ...by its noise part (not REL): clear of the step's and the write's noise
        self.ck_clear = np.zeros(n, bool)
        self.ck_over = np.zeros(n, bool)  # ...by a faint one (FAINT_REL)
        self.hist: deque[int] = deque(maxlen=WINDOW)  # indices of healthy steps
        self.hist_ck: deque[float] = deque(maxlen=CKPT_HISTORY)  # checkpoint extra over the normal baseline
        self.cusum = Cusum(duration, is_ckpt, self.slow, self.ck_x, self.ck_clear, self.hist, seq)
        self.prev = -1  # the last step judged by the per-step test (not a checkpoint step)

    def step(self, i: int) -> None:
        """Judges step `i` by the window of the healthy steps before it."""
        d = float(self.duration[i])
        if not np.isfinite(d):
            return
        if len(self.hist) < MIN_HISTORY:
            self._bootstrap(i, d)
            return
        idx = np.fromiter(self.hist, int, len(self.hist))
        med, sigma = _robust(self.duration[idx])
        med_t, self.sig_t[i] = _robust(self.transfer[idx])
        if self.has_data:
            self.base_d[i], self.sig_d[i] = _robust(self.data[idx])
        if self.is_ckpt[i]:
            self._checkpoint(i, d, med, sigma, med_t)
        else:
            self._plain(i, d, idx, med, sigma, med_t)

    def _bootstrap(self, i: int, d: float) -> None:
        # take steps that are not wildly off the few seen (step 0 compiles)
        hist = self.hist
        if not self.is_ckpt[i] and (not hist or d < BOOTSTRAP_MAX_RATIO * _median(self.duration[list(hist)])):
            hist.append(i)
            if len(hist) == MIN_HISTORY:
                _without_warmup(hist, self.duration)

    def _checkpoint(self, i: int, d: float, med: float, sigma: float, med_t: float) -> None:
        """Checkpoint step `i` by its own baseline: the plain steps' median `med` and the extra its
        write has taken."""
        seg = self.cusum.seg
        enough = bool(self.hist_ck)  # any earlier checkpoint: one is a better bar than the phase alone
        if enough:
            extra = _median(self.hist_ck)
        elif np.isfinite(self.ckpt_med[i]):
            extra = float(self.ckpt_med[i]) + MIN_EXCESS_S
        else:  # the job's first checkpoint, its write not measured (not marked): it is its own example
            extra = max(d - med, 0.0)
        b = med + extra
        self.plain[i] = med
        t = b + max(K_SIGMA * sigma + CKPT_SPREAD_SHARE * extra, REL * b)
        self.ck_x[i] = (d - b) / med
        self.slow[i] = d > t
        self.sig[i] = sigma
        # over its noise as a plain step's borderline, with the checkpoint's own spread on top
        self.ck_clear[i] = d - b >= BORDER_Z * sigma + CKPT_SPREAD_SHARE * extra
        self.ck_near[i] = self.ck_clear[i] and d - b >= REL * b
        self.ck_over[i] = d - b >= FAINT_REL * b
        # inside an open proven segment it carries the shift too (final once the end is known)
        self.live[i] = self.slow[i] or (seg.proven and self.ck_x[i] > self.seq.shift / 2)
        if not self.live[i] and not self.ck_over[i] and seg.onset < 0 and d >= med:
            # not while an excursion is open: a long fault's checkpoint steps, under half its
            # shift by the extra its earlier checkpoint steps taught, would make it the norm;
            # nor a borderline or faint one: a slow write that only checkpoint steps show is
            # never an excursion, and its first steps (borderline, then corroborated) would teach
            # it (a slow checkpoint volume's faint steps, once learned, put its next steps under
            # FAINT_REL). Nor one under the plain steps' median: a write adds time, so that median is
            # not the job's level (a window opened inside a slow fault, whose steps were its first
            # "healthy" ones); it taught a negative extra, and every later checkpoint step read slow
            self.hist_ck.append(d - med)
        self.base[i], self.base_t[i], self.thr[i] = b, med_t, t

    def _plain(self, i: int, d: float, idx: np.ndarray, med: float, sigma: float, med_t: float) -> None:
        """Plain step `i` by the per-step test, the pair test and the sequential test (`idx`: the
        window's steps, `med` and `sigma` their median and robust sigma)."""
        seq, hist = self.seq, self.hist
        b = med
        t = b + max(K_SIGMA * sigma * history_margin(len(idx)), REL * b)
        self.slow[i] = d > t
        self.base[i], self.base_t[i], self.thr[i] = b, med_t, t
        self.sig[i], self.centre[i] = sigma, _trimmed_mean(self.duration[idx])
        noisy = sigma > seq.max_noise * b
        if seq.enabled and seq.pair_z and self.prev >= 0 and not noisy:
            self._pair(i, d, b, sigma)
        self.prev = i
        if noisy and self.cusum.seg.onset >= 0:
            self.cusum.abandon()
        if not seq.enabled or len(hist) < seq.min_history or noisy:
            if not self.slow[i]:
                hist.append(i)
            self.live[i] = self.slow[i]
            return
        self.live[i] = self.cusum.step(i, d, b, sigma, idx)

    def _pair(self, i: int, d: float, b: float, sigma: float) -> None:
        # two steps in a row both well over the noise: a short fault (2-3 steps of +10-15 %) that
        # neither the per-step threshold (one hiccup must not do) nor the CUSUM (needs h / cap
        # steps) can prove alone
        seq, prev, slow = self.seq, self.prev, self.slow
        xi, xp = d - self.centre[i], self.duration[prev] - self.centre[prev]
        if xi >= max(seq.pair_z * sigma, seq.pair_min * b) and xp >= max(
            seq.pair_z * self.sig[prev], seq.pair_min * self.base[prev]
        ):
            slow[i] = True
            if not slow[prev]:
                slow[prev] = True
                if prev in self.hist:
                    self.hist.remove(prev)


def compute_baselines(
    duration: np.ndarray,
    transfer: np.ndarray,
    is_ckpt: np.ndarray,
    ckpt_med: np.ndarray,
    seq: SeqParams = DEFAULT_SEQ,
    data: np.ndarray | None = None,
    ckpt_max: np.ndarray | None = None,
) -> Baselines:
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
    data_ok, transfer_ok = np.isfinite(data), np.isfinite(transfer)
    p = _Pass(
        duration,
        np.where(transfer_ok, transfer, 0.0),
        np.where(data_ok, data, 0.0),
        is_ckpt,
        ckpt_med,
        seq,
        has_data=bool(data_ok.any()),
    )
    for i in range(n):
        p.step(i)
    p.cusum.finish()
    return _verdicts(p, ckpt_max, transfer_ok, data_ok)


def _verdicts(p: _Pass, ckpt_max: np.ndarray, transfer_ok: np.ndarray, data_ok: np.ndarray) -> Baselines:
    """The pass's answers, and the steps under the bar that their own telemetry decides."""
    duration, is_ckpt, seq, slow = p.duration, p.is_ckpt, p.seq, p.slow
    base, sig = p.base, p.sig
    # steps judged in a job calm enough for the multi-step tests (`max_noise`, as _Pass._plain's `noisy`)
    with np.errstate(invalid="ignore"):
        calm = (sig <= seq.max_noise * base) & seq.enabled
    if seq.ckpt_next_to_slow:
        _checkpoints_in_faults(slow, is_ckpt, p.ck_x, calm, seq)
    step_slow = np.zeros(len(duration), bool)
    ok = np.isfinite(p.thr) & np.isfinite(duration)
    step_slow[ok] = duration[ok] > p.thr[ok]
    over = duration - p.centre
    with np.errstate(invalid="ignore"):
        near = ~slow & ~is_ckpt & calm & np.isfinite(over)
        border = near & (over >= BORDER_Z * sig) & (over >= REL * base)
        faint = near & ~border & (over >= FAINT_Z * sig) & (over >= FAINT_REL * base)
        ck_faint = p.ck_over & ~p.ck_near & ~slow & calm
        border |= (p.ck_near | ck_faint) & ~slow & calm
        # the collectives alone lost REL of the step to the network, whatever the rest of it did
        # ...or the ranks' median data phase alone (every loader, as a shared volume makes it)
        x_net = np.where(transfer_ok, p.transfer - p.base_t, np.nan)
        x_data = np.where(data_ok, p.data - p.base_d, np.nan)
        # checkpoint steps too: the write is a phase of its own, and a fault's collectives or loaders
        # lose their time at a checkpoint step as at any other, hidden there by the write's spread.
        # In a noisy job too: each phase is judged against its own spread, not the step's, so host
        # noise that scatters the step times (a busy core) does not hide a loss that every rank's
        # loaders or collectives share (their median across ranks stays steady under such noise)
        unjudged = ~slow & ~border & ~faint
        net_only = unjudged & _phase_lost(x_net, p.sig_t, base)
        data_only = unjudged & ~net_only & _phase_lost(x_data, p.sig_d, base)
        # a checkpoint step's excess is what it took beyond a plain step and its slowest write (the
        # barrier waits for that writer): a 2-s network stall at its barrier with the loaders a few
        # ms slow is not the loaders' loss (else a link flap during a checkpoint step's barrier names
        # the shared dataset volume from its loaders' timing alone)
        # (a checkpoint step its job did not mark has no measured write: its excess over its own bar's base)
        over = np.where(
            is_ckpt,
            np.where(np.isnan(ckpt_max), duration - base, duration - p.plain - np.nan_to_num(ckpt_max)),
            duration - p.centre,
        )
        net_timing = _own_timing(x_net, p.sig_t, over, base)
        data_timing = _own_timing(x_data, p.sig_d, over, base)
    judged = border | faint | net_only | data_only
    return Baselines(
        base=base,
        base_transfer=p.base_t,
        threshold=p.thr,
        slow=slow,
        live=p.live,
        episode=episodes(slow, slow & ~step_slow),
        step_slow=step_slow,
        sigma=sig,
        centre=p.centre,
        sigma_transfer=p.sig_t,
        borderline=judged,
        faint=faint,
        ckpt_faint=ck_faint,
        net_only=net_only,
        data_only=data_only,
        net_timing=net_timing,
        data_timing=data_timing,
        near_slow=judged & _near(slow),
        data_base=p.base_d,
        data_sigma=p.sig_d,
    )


def _near(slow: np.ndarray) -> np.ndarray:
    """bool: the steps within NEAR_SLOW_STEPS of a slow step."""
    near_slow = np.zeros(len(slow), bool)
    for k in range(1, NEAR_SLOW_STEPS + 1):
        near_slow[k:] |= slow[:-k]
        near_slow[:-k] |= slow[k:]
    return near_slow


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
