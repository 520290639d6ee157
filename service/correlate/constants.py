"""The engine's numbers in one place, each with the reason for its value.

Module constants are the pure stages' (baseline.py, decompose.py, localize.py, queries.py import
them from here). `EngineConfig` is passed to `AttributionEngine`, so a test or a benchmark can vary
one of them; its defaults are what the service runs with. All values are the ones the simulator
benchmark (bench/attribution.py) was tuned on. The signal tables (which metric points at which layer
with which weight, per-metric floors) are data and stay in localize.py.
"""

from __future__ import annotations

from dataclasses import dataclass

# Scales a median absolute deviation to a standard deviation for normal data (1 / Phi^-1(3/4)).
MAD_TO_SIGMA = 1.4826

# -- numbers several rules share: one principle, one value (rules/catalogue.py SHARED) -------------
# An outlier is three robust sigmas (or standard errors) out: rare by chance (about 1 in 370 for
# normal noise, one-sided 1 in 740), common under a fault. Every rule that asks "does this stand out
# from its noise?" without a reason of its own for another bar uses it.
OUTLIER_Z = 3.0
# The least sustained regression that must be reported (relative): the sequential test is designed
# for it, and the rules that ask "is this step over its own level by a fault's amount?" use it too.
SHIFT = 0.05
# "Most of it": a share that holds at least half is the larger part (of a phase's excess, a host's
# ranks, a step's loss, a state's time in the step).
MAJORITY = 0.5
# The confidence of a coin toss: what a cause named by one kind of evidence that cannot tell it from
# the alternative starts at, and rises from as its evidence grows.
COIN = 0.5
# The least confidence at which a named cause stands on its own (over `unknown_confidence`, under
# a host's TCP retransmissions alone at 0.29-0.49: one series, 100x its past but 3 floors over it).
WEAK_CONFIDENCE = 0.25
# The confidence of a finding that telemetry alone makes specific (a component's own counters or
# state, not timing): what a step with only faint timing needs, and what a GPU named from its
# telemetry alone starts at.
STRONG_CONFIDENCE = 0.8
# A cause inferred without its own telemetry in the step (from timing alone, or from the steps of
# its episode) keeps this share of its confidence: the timing says where, not why.
INFERRED_SHARE = 0.6

# -- step-time baseline (baseline.py) ------------------------------------------------------------
# Healthy steps kept: a few minutes of training at 1-5 s steps, enough for a stable median.
WINDOW = 48
# Steps needed before judging: fewer give a median that one odd step can move.
MIN_HISTORY = 5
# A step is slow beyond K_SIGMA robust sigmas: healthy jitter is ~1-2 sigma, so 6 has no false alarms.
K_SIGMA = 6.0
# ...sigmas of a full window: a MAD-based sigma of n steps has a relative standard error of about
# 1.16 / sqrt(n) (the MAD's 37 % efficiency), so with fewer steps the bar is set on sigma's upper one-
# standard-error bound, scaled to the full window's (baseline.history_margin): a job's first judged
# steps (5-8 of history) read a sigma a third under their noise often enough that a +4.6 % step
# among them was slow. Not tuned: the MAD's own standard error.
MAD_SIGMA_SE = 1.16
# ...and never for less than 4% over the baseline (below that nobody loses real time).
REL = 0.04
# A step under the bar but BORDER_Z sigmas and REL over the window's centre is "borderline": slow
# when its own telemetry names a cause (engine.py, corroborate_min_confidence). Timing alone cannot
# tell a 1-2 step +5 % fault from jitter; a counter that moved in the same seconds can.
BORDER_Z = 1.5
# ...and "faint" between FAINT_Z sigmas and FAINT_REL over it (under BORDER_Z or REL): slow only when
# its telemetry names a cause with corroborate_faint_confidence. The stronger the telemetry, the less
# timing it needs: a 3-step +5 % fault in 4 % jitter measures 1.2-1.5 sigma, and a noisy step a +4 %
# fault slowed by 3.5 %, while a volume's latency or a host's throttling shows in the same seconds.
# Picked on the simulator's tuning runs (1.0 / 3 %: every such miss there whose telemetry was >= 0.8).
FAINT_Z = 1.0
FAINT_REL = 0.03
# A borderline or faint step this many steps or fewer from a slow step is corroborated only by its own
# rank timings (a straggler), not by sampled telemetry: a switch sampled every 4-10 s has one sample
# for two to five 2-s steps, and the one that holds a fault's first or last seconds reads as an
# anomaly of the healthy steps beside it (a 2-step incast on a 4-s switch lends its anomaly to the
# steps two before and after it).
NEAR_SLOW_STEPS = 3
# ...except by the step's own collective timings, for a network cause: the collectives' pure transfer
# time (each collective's fastest rank) over its own baseline by NET_TIMING_Z of its own spread, by
# NET_TIMING_SHARE of the step's excess and by FAINT_REL of the step (a fault that slowed a step by
# under 2 % leaves it healthy, and its network share plus compute jitter is no faint step). That is
# the step's own measurement that the network lost the time, as a straggler's phase timings are for
# a host or a GPU; a coarse sample's anomaly only says the network was unwell near it. Chosen on the
# simulator's tuning and development runs: the network faults' first and last partly covered steps measured
# 31-45 spreads and 4-7 % of the step, the healthy steps beside other faults under 2 spreads.
NET_TIMING_Z = 4.0
NET_TIMING_SHARE = MAJORITY
# Sigma floor relative to the median: a perfectly steady job (MAD 0) must not flag 0.1% noise.
MIN_SIGMA_REL = 0.002
# Steps a flat slow run must last before it is the job's new level (a new training phase) rather
# than a fault: one whole baseline window of it, so the level it replaces is one the window held
# (WINDOW's 48 are longer than the longest fault that must still be reported, 40 steps, so a
# sustained fault is never adopted as normal). The price: a legitimate new level is reported slow
# for its first 48 steps (a few minutes) before it is accepted.
CHANGE_RUN = WINDOW
# ...and flat: its two halves' medians agree within 2% (a ramp, e.g. a growing leak, is not a level).
CHANGE_HALF_AGREE = 0.02
# ...and its spread is at most twice the healthy one (a new level has the job's usual noise).
CHANGE_SIGMA_RATIO = 2.0
# While bootstrapping, a step over 1.5x the median of the few seen is warm-up (step 0 compiles).
BOOTSTRAP_MAX_RATIO = 1.5
# Checkpoint extras remembered: checkpoints are rare, 8 span a long run.
CKPT_HISTORY = 8
# A checkpoint step is judged against the job's earlier checkpoint steps however few they are (one
# is enough; judged against its own phase time, a write twice as long as the job's previous one reads
# as normal); the job's first checkpoint against its own phase time plus MIN_EXCESS_S (a write that
# takes its usual time is not slow).
# Share of the checkpoint extra added to the slow threshold: checkpoint writes vary more than steps.
CKPT_SPREAD_SHARE = 0.05
# A job that marks no checkpoints: a step whose volumes took over this many times the median step's
# written bytes wrote a checkpoint (write_burst.py). Training steps write logs and metrics, a few KB;
# a checkpoint writes the model's state, GBs: the two are orders of magnitude apart.
CKPT_WRITE_BURST = 10.0


# -- sequential detection of small sustained regressions (baseline.py) ----------------------------
@dataclass(frozen=True)
class SeqParams:
    """One-sided CUSUM on the steps' log-likelihood ratio "shifted by `shift`" vs "at baseline".
    Values picked by bench/sequential_detection.py on tuning seeds (reported on held-back ones)."""

    # Smallest sustained shift that must be reported (relative): the CUSUM is tuned to it, so a
    # step counts as evidence for a fault when it is more than half of it over the baseline.
    shift: float = SHIFT
    # ...or this many of the job's own robust sigmas when that is more (Page's design for a shift of
    # a couple of sigmas): in a noisy job (the lab under CPU contention: sigma 30-40% of the step) a
    # 5% design gains almost nothing per step even from a doubled step time, and its evidence is a
    # random walk with almost no drift, so it also proves shifts that are noise; a shift under ~2
    # sigma cannot be told from noise in a few steps anyway. Jobs with sigma under 3.3% keep the 5%
    # design. 1.5 picked on tuning seeds (over 2 and 3: best +5% recall), reported on held-back ones.
    shift_sigmas: float = 1.5
    # Evidence (log-likelihood ratio) that proves a shift: a +5% shift in 2.5% noise gains ~2 a step,
    # healthy steps lose ~2 a step; 16 keeps runs of right-tail jitter from proving anything.
    h: float = 16.0
    # Most evidence one step can add or remove: a single hiccup (GC, page fault) cannot prove a
    # shift alone (needs h / cap steps), one fast step cannot erase one.
    cap: float = 4.0
    # Evidence lost since the segment's peak that proves it has ended (reverse test from the peak).
    h_end: float = 5.0
    # A proven segment must average at least REL over the baseline: below that nobody loses real
    # time (the per-step floor), and a slow 2-3% wander of a noisy job is not a fault.
    min_mean: float = REL
    # ...as measured, within this many standard errors of its mean (the steps' robust sigma over
    # the square root of their number): the noise of a handful of steps hides a fifth of a +5 %
    # fault's shift about as often as it adds as much. 0: the mean itself must reach min_mean.
    min_mean_se: float = 1.0
    # The test runs only in a job whose healthy steps vary at most this much (robust sigma over the
    # baseline): it exists to find a +5 % shift in 1-2 % jitter. In a job whose steps vary 20 % (the
    # fabric lab's 0.1-s steps, measured in CI) the healthy level itself wanders by 10-50 % for dozens
    # of steps; a CUSUM there flagged 87 steps outside every fault of one lab run. Such a job keeps
    # the per-step test alone, as before.
    max_noise: float = SHIFT
    # Healthy steps needed before the sequential test runs. 20 left a fault that begins in a job's
    # first 20 steps in the window it is judged by: it raised its own bar and hid the faults after it
    # (a +5-9 % fault among them). With the adaptive end and the
    # reset below, 6 to 14 give the same answers on the tuning seeds and no false slow step; 10 is
    # the middle (a sigma from 10 steps is within ~25 % of the true one).
    min_history: int = 10
    # An excursion made only of steps the per-step test flagged already restarts at the first step
    # that is back at the baseline: without this, a large fault's capped evidence (4 a step) sat just
    # under `h`, and the jitter of the next healthy steps proved a "small shift" that was not there.
    reset_after_loud: bool = True
    # An excursion whose evidence has fallen `h_end` below its peak before it was proven is over: its
    # steps are healthy (their own evidence fell short) and the next excursion starts from zero.
    # Without this, a +7 % fault just short of proof lent its evidence to a large fault three steps
    # later, and the proof marked the healthy steps between them slow (on the tuning runs it removed
    # most such false slow steps for under 1 % of the faulty ones).
    end_unproven: bool = True
    # An excursion proven only once per-step-slow ("loud") steps joined it, whose quiet steps before
    # them were never proven on their own (their evidence stayed under `h`) and fell by `cap` or more
    # between their peak and the first loud step (a step back at the baseline between them), is the
    # loud fault alone: the quiet steps are left out of it (they are judged as any step under the
    # bar: borderline ones by their own telemetry). Without this, a 2-step +5 % fault 1-3 steps
    # before a large one lent it its evidence and the proof marked the healthy steps between them slow
    # (an evidence drop of 4-5, just under `h_end`). Measured on runs never used for tuning: most
    # such false slow steps gone, recall and layer unchanged, bench/sequential_detection.py
    # unchanged.
    split_quiet_prefix: bool = True
    # A proven segment whose steps part best into a lower and a higher level, the higher this many
    # standard errors over the lower, and whose lower part (no step slow on its own) would not be
    # proven alone (mean short of min_mean by over min_mean_se standard errors): the lower part is
    # the job's noise, and the shift begins where the level rose (sequential._drift_prefix). Without
    # it a dozen steps' +2.5 % wander in 2.2 % noise is proven with a larger fault that follows it,
    # and its healthy steps are false slow. 3: a true shift's own noise parts it this far about once in
    # a thousand. 0: off.
    drift_split_z: float = OUTLIER_Z
    # A proven segment's leading steps under this excess over the window's centre (and not slow on
    # their own) are not its onset: the CUSUM dates a change from the last step its evidence was zero,
    # and a healthy step that ran 2-3 % over just before a fault (1-2 sigmas: one in ten) became the
    # fault's first slow step (0: off). FAINT_REL's 3 %, the least a faint step is over its centre:
    # fewer such false onsets with recall unchanged, on tuning and held-back runs of both benches.
    onset_min: float = FAINT_REL
    # An open excursion is tested against its own level (the median excess of its steps) when that
    # is above the design shift (adaptive CUSUM): healthy steps then drain a large fault's evidence
    # at once, where a 5 % design drains ~1 a step and carried it into the next fault.
    adaptive: bool = True
    # Two steps in a row both at least `pair_z` sigmas and `pair_min` over the window's centre are
    # slow: a 2-3 step fault of +10-15 %, which the per-step threshold (one hiccup must not do) and
    # the CUSUM (h / cap = 4 steps at least) cannot prove. 3 sigmas and the design shift picked on the
    # tuning seeds of both benches (bench/attribution.py recall, bench/sequential_detection.py false
    # slow steps on fault-free series <= 0.1 %; 4 % instead of 5 % went over it).
    pair_z: float = OUTLIER_Z
    pair_min: float = SHIFT
    # A checkpoint step next to a slow step is slow when it runs this much over its own baseline (a
    # fault that ends with it adds to it; 0: off). The design shift; 2.5 % flagged healthy ones.
    ckpt_next_to_slow: float = SHIFT
    # An excursion's step that the per-step test flags and that runs this many times the level of
    # the excursion's quiet steps (at least the design shift) is another fault's step, slow on its
    # own: it neither adds to nor takes from the evidence of the excursion's shift (0: off, every
    # step counts, capped). Without this, one-step faults (+21 to +29 %) five steps apart each put
    # back the evidence that the healthy steps between them drained: a +7 % fault of three steps
    # that its own evidence had not proven was proven with two of them, and every healthy step between
    # them was slow. Twice: a fault's own
    # wobble (+-15 % of its size) keeps its flagged steps under it.
    other_fault_ratio: float = 2.0
    # ...once the excursion has this many quiet steps: one or two may be a fault's partial first
    # step (a volume slowed from a third into a step, +12 %, then +21-25 % a step: one fault).
    other_fault_quiet: int = 3
    enabled: bool = True


DEFAULT_SEQ = SeqParams()
# A step of a proven segment is left out of it when its own excess is this many healthy sigmas under
# the midpoint between the baseline and the segment's level: clearly nearer the baseline. Three
# sigmas keep every step of a small (+5-12 %) segment in it (the cut falls under the baseline) and
# drop the healthy steps between two large faults that the draining evidence would carry along.
SEG_MEMBER_SIGMAS = OUTLIER_Z
# Later steps the engine reads when it judges a step (look-ahead): a 5% shift in 2.5% noise is
# proven within ~8 steps and its end within ~4, so 16 later steps give a step its final answer.
SEQ_LOOKAHEAD_STEPS = 16
# Healthy steps allowed inside one sustained episode (baseline.episodes): a fault's slow step (a
# throttled checkpoint write) and the slightly slower steps after it are one episode even when the
# CUSUM restarts a step or two later (a step under the noise in between).
EPISODE_GAP_STEPS = 2
# ...and a run of this many slow steps is sustained even when each was slow on its own (a quiet job:
# +7 % is over the per-step bar): as many as the sequential test needs at most to prove a shift
# (h / cap), so it is the same notion of "sustained" with or without noise.
EPISODE_MIN_STEPS = round(DEFAULT_SEQ.h / DEFAULT_SEQ.cap)

# -- stragglers (decompose.py) --------------------------------------------------------------------
# Peer z-score for a rank's excess work to count as a straggler (jitter among ranks stays under 3).
MIN_Z = 5.0
# ...and at least this much excess (seconds): below 10 ms nobody waits long enough to matter.
MIN_EXCESS_S = 0.01
# Spread floor of local work: 0.3% of the median, at least 5 ms (timer and scheduling noise).
WORK_MAD_FLOOR_REL = 0.003
WORK_MAD_FLOOR_S = 0.005
# A host whose ranks all wrote their checkpoint this many of the other ranks' sigmas longer (and
# everyone waited for it) is a checkpoint straggler at a checkpoint step with no other straggler
# (decompose.checkpoint_straggler): a write's own spread across hosts is 4-5 % of it, so a throttled
# local volume's +20 % is 4 sigma, under MIN_Z. Only for hosts with a volume the job checkpoints to.
CKPT_MIN_Z = 3.5
# Ranks slow in the same phase by at least half the worst one's excess are slow with it.
MEMBER_SHARE = MAJORITY
# A straggler is host-level when its slow ranks are all on one host and at least half of that host.
HOST_LEVEL_SHARE = MAJORITY

# -- localization (localize.py, queries.py) -------------------------------------------------------
# Seconds before a step in which a signal still explains it. A link that went down and came back
# leaves the transports on it backing off (TCP RTO doubling, RoCE retry timers, collective
# reconnects): the step that stalls can start seconds after the counter moved.
AFTERMATH_S: dict[str, float] = {"link_down_total": 10.0}
# ...but evidence seen only in those seconds before the step counts at this share of evidence in its
# window: it explains a step when nothing present does (the lab's flap), not over a fault that is on
# now (congestion on the link that flapped a few seconds earlier).
AFTERMATH_WEIGHT = 0.3
# Longest a series' sample may lie past a step's window and still be the one that covers its end:
# collectors sample every 1-10 s, and one lost sample doubles a span; 30 s bounds the index probe
# while a collector that was silent longer says nothing trustworthy about the step.
MAX_SAMPLE_GAP_S = 30.0
# Seconds past a step's window read in the same index range as the window itself: enough to hold the
# next sample of a 1-2-s collector (most NIC and switch telemetry), so only slower collectors' series
# pay an index probe each; a longer range would read more rows of the fast ones than probes cost.
NEXT_SCAN_S = 2.5
# Score a series needs to count as anomalous (3 robust sigmas: rare by chance, common under a fault).
MIN_SCORE = OUTLIER_Z
# Peer z-score a series needs to come back from the database at all: the same bar as MIN_SCORE.
PEER_MIN_Z = OUTLIER_Z
# Outliers returned per window: more than any real fault lights up, bounded for a fabric-wide storm.
MAX_OUTLIERS = 64
# When the step-window query reads the window's whole time range (BRIN) and keeps the job's series
# by bitmap instead of an index range per series (window.use_bitmap): a job of at least this many
# scored series (~1,000 ranks) holding at least this share of the database's series. Reading the
# range costs ~40 ns per sample in it (any series'), an index range ~3 us per series; a series has
# ~4 samples in a window, so the range wins from a share of ~1/20 on (measured at 4,096 ranks with
# half the database: 205 vs 310 ms of database CPU). BITMAP_MAX_SPAN: most bits per scored series
# (the bitmap spans the job's lowest to highest series id; ids far apart make it too long to send).
BITMAP_MIN_SERIES = 20_000
BITMAP_MIN_SHARE = 0.125
BITMAP_MAX_SPAN = 16
# When the window is read from sample frames (window.use_frames; service/db/frames.py): every sample
# of the window's seconds comes back, any series', at ~65 ns each (~0.45 us per series in the
# database), against ~3 us per scored series of an index range: frames win from a share of ~1/7 on.
FRAMES_MIN_SHARE = 0.125
# A series without own history counts its peer score discounted: it could be always this high.
NO_HISTORY_DISCOUNT = 0.7
# -- series without peers: a shared volume (a storage system's volume every host reads) is a
# peer group of one; it is scored against its own history alone. Its excess is measured in units of
# its own noise (MAD), but at least this share of its usual level (a gauge's usual wobble is ~10 %;
# a volume "several-fold" slower is +100 % and more, and still +50 % in a sample that overlaps only
# half of a short fault) and at least this share of the metric's floor
# (FLOORS assumes a host's local volume; a storage system's latency level is its own).
SOLO_REL_FLOOR = 0.15
SOLO_FLOOR_SHARE = 0.05
# -- a read latency's floor follows its level (localize.LEVEL_FLOORS): FLOORS' 2 ms is five times a local
# NVMe volume's whole read latency, so against its peers such a volume showed a five-fold slowdown
# (0.8 -> 4-6 ms in a 9-s sample) at a peer z of 2 and was no evidence (its fault named
# as the volume's host). Never under this share of FLOORS (SOLO_FLOOR_SHARE's 0.1 ms).
LEVEL_FLOOR_MIN_SHARE = SOLO_FLOOR_SHARE


@dataclass(frozen=True)
class EngineConfig:
    # -- corroborated steps ----------------------------------------------------------------------
    # A borderline step (baseline.py) is slow when the cause its telemetry names (not `unknown`) has at
    # least this confidence; 0 or more than 1: never (either tier). 0.25: over unknown_confidence, under
    # a host's TCP retransmissions alone (0.29-0.49: one series, 100x its past but 3 floors over it);
    # 0.5 lost such steps on the tuning runs and no false one.
    corroborate_min_confidence: float = WEAK_CONFIDENCE
    # A faint step (baseline.py: FAINT_Z, FAINT_REL) needs this much: most of a healthy step's own
    # telemetry names nothing, and what it names (a neighbouring fault's tail in a 10-s sample) is weak.
    corroborate_faint_confidence: float = STRONG_CONFIDENCE
    # A step under every timing bar is still slow when its ranks waited for a straggler this share of
    # the baseline longer than for the next-slowest rank (decompose.straggler_loss; engine.py) and its
    # telemetry names the cause with a `timing` row of its own: the ranks' clocks measure the time the
    # fault cost, where the step time also carries the step's noise (a +5 % GPU fault in a step whose
    # collectives ran 3 % faster measures +2 %). REL, the least loss that is a slow step; not tuned.
    # Healthy steps' stragglers in the simulator's development runs (about one healthy step in 180 has
    # one) cost at most 2.3 %. inf: off.
    corroborate_straggler_loss: float = REL
    # ...and this share, for a step beside a slow step (or between two) whose answer names the cause
    # on the straggler's host (corroborate.hidden_slow): its neighbours already name it, and the
    # ranks' wait for the straggler past the next-slowest rank measures under what the fault cost
    # (the other ranks' own noise): ranks have waited 3.8-3.9 % of the baseline for faults that
    # cost 4.0-4.1 %. FAINT_REL, the least a faint step is
    # over its centre; not tuned. inf: off.
    beside_straggler_loss: float = FAINT_REL
    # ...counting, when the straggler is one GPU, what the step's collectives lost over their baseline
    # transfer: a GPU whose PCIe link trained down carries its share of every collective at a fraction
    # of its speed, so part of its loss is in the ring, which the wait for its work does not hold (a
    # downtrain's first step: the ranks may wait 2 % of the baseline for the GPU past the next-slowest
    # rank while the collectives lose 3 % more). The neighbours must still
    # name that GPU, and the step's own clocks show it straggling. False: the wait alone.
    beside_ring_loss: bool = True
    # ...and, at those shares (beside_straggler_loss, beside_ring_loss), a borderline step with no slow
    # step beside it whose straggler GPU reports a state that alone slows it (causes.has_origin_state:
    # a throttle flag, a PCIe link trained down) in the step's own span (corroborate.hidden_slow).
    # False: off.
    origin_state_straggler: bool = True
    # ...and a borderline step whose straggler GPU's wait and ring loss together reach
    # corroborate_straggler_loss while its own error counters run in the step's own span
    # (causes.has_error_rate: PCIe replays; corroborate.hidden_slow). False: off.
    error_rate_straggler: bool = True
    # A step only the sequential test flagged, under FAINT_REL over its centre, whose own evidence and
    # its episode's name nothing, is healthy (engine.py; its evidence an `onset` row). False: off.
    unnamed_level_healthy: bool = True
    # A step's work loss (engine._explain: its time less its collectives', over their baselines) is at
    # least what its ranks waited for a straggler past the next-slowest rank (baseline.work_lost).
    # False: the split of the step time alone.
    measured_work_loss: bool = True
    # -- history and windows --------------------------------------------------------------------
    # Steps of history fetched to rebuild the baseline: three baseline windows (48 healthy steps)
    # so that a fault of a dozen steps still leaves enough healthy ones behind it.
    history_steps: int = 160
    # Seconds of a source's own history its window value is compared with: long enough for a robust
    # median/MAD at 1-10 s sampling and for a fault of 10-40 steps to stay a minority of it (a median
    # follows a fault that fills half its window: 90 s did after 45 steps of 2 s, and a noisy job's
    # 36-step link fault, with no episode to look before, lost its evidence half-way), short enough
    # that a diurnal load shift does not count. 300 s.
    own_history_s: float = 300.0
    # The history window ends this long before the step, so the step's own samples are not in it.
    own_history_gap_s: float = 0.5
    # A step inside a sustained episode that began at most this long ago is compared with its sources'
    # history before the episode's first step (engine.py); an older one with the own_history_s before
    # it, since a past that old may no longer be the source's normal (a new phase, a diurnal load).
    # Not tuned: ten minutes, longer than any fault that must be reported (10-40 steps).
    episode_history_max_s: float = 600.0
    # Telemetry window after a step ends: half the step, at least 1 s (a sample interval) and at
    # most 5 s, because counters are scraped after the fact and a long step's tail is already in.
    window_pad_share: float = 0.5
    window_pad_min_s: float = 1.0
    window_pad_max_s: float = 5.0
    # A slow step that no cause explains with a coarse counter's edge samples read as changes outside
    # its window (edges.py) is read again at those samples' even spread (engine._explain)
    edge_spread_fallback: bool = True

    # -- caches -----------------------------------------------------------------------------------
    # A job's ranks, links and series change only when topology or new series arrive: a few seconds
    # of staleness is harmless and saves four queries per attributed step. Past it, one query checks
    # whether they changed (queries.TOPO_STAMP_SQL); only then is the topology rebuilt.
    topo_ttl_s: float = 10.0
    # ...and rebuilt anyway after this long: a series id committed out of order (another transaction
    # took a lower id and committed after a check) is below the stamp's newest id and would otherwise
    # be missed. Ten minutes: one rebuild (2-5 s at 4,096 ranks) in hundreds of attributed steps.
    topo_rebuild_s: float = 600.0
    # Jobs whose topology is kept; more than a cluster runs at once, few enough to stay small.
    topo_cache_size: int = 256
    # Final per-step summaries kept over all jobs (about 200 bytes each: ~10 MB at most).
    summary_cache_size: int = 50_000
    # A step is final (cacheable) once this many newer steps exist: late ranks arrive within a step.
    final_lag_steps: int = 2
    # ...and when at least this share of the ranks reported it (a lost rank must not block caching).
    final_rank_share: float = 0.9

    # -- causes -------------------------------------------------------------------------------------
    # A cause explaining less than this share of the lost time is noise and is not listed.
    min_share: float = 0.15
    # Telemetry rows of evidence kept per cause: enough to show origin and symptoms, short to read.
    evidence_per_cause: int = 4
    # Cap on a straggler's z-score in evidence: a zero-MAD peer group gives astronomically large z.
    max_evidence_score: float = 1e6
    # Confidence of a cause the engine could not name: low, but not zero (the step *is* slow).
    unknown_confidence: float = 0.2
    # Floor of the telemetry coverage applied to an unnamed network cause.
    unknown_coverage_floor: float = 0.2
    # Confidence of a storage cause with no straggler to tie it to a rank: a coin toss at best.
    storage_without_straggler_confidence: float = COIN
    # A storage cause with no straggler (a shared volume every rank reads) explains time the ranks
    # spent reading, so it is named only when the step's median `data` phase is at least this share
    # of the lost local work. In the fabric lab a packet-loss step lost 0.26 s waiting outside the
    # timed collectives while `data` took 11 ms, and a sub-millisecond shared volume's scheduling
    # jitter (0.5 -> 1.9 ms) would otherwise have taken that time. Half: a volume's slowdown is all in
    # `data` (which also holds the usual read time), other local work's noise is not.
    storage_data_share: float = MAJORITY
    # A straggler whose own phase excess is under this share of the step's lost local work did not
    # cause most of it: with a candidate off the job's hosts (a shared volume) that the ranks' reading can hold
    # (storage_data_share), the storage is named instead (a shared volume slowed at a checkpoint
    # step, whose slowest writer was 6 sigmas out by a fifth of the time lost).
    straggler_min_share: float = 0.35
    # A network cause corroborates a step under the bar on its own only when the step's collectives
    # (their pure transfer time, Baselines.transfer_lost) lost at least this share of what the step
    # lost: a network fault slows the collectives. A coarse counter whose span reaches into the step
    # from a fault that ended in the step before it does not (a lossy incast's
    # drops read high in the step after it, whose collectives lost a small share of its loss).
    # Between two steps that name the cause (`between`) it still may. 0: the rule off.
    net_min_share: float = 0.25
    # Straggler strength = base + span * (1 - exp(-z / scale)): z of 5 (the detection bar) gives
    # ~0.64, z of 60 and more approaches 0.95.
    straggler_base: float = 0.55
    straggler_span: float = 0.4
    straggler_z_scale: float = 20.0
    # A checkpoint straggler pinned on the volume its checkpoints go to (from the hook's checkpoint
    # events) with no anomalous telemetry of that volume: the timing alone says which host, not why.
    checkpoint_without_telemetry_factor: float = INFERRED_SHARE
    # Network confidence = (base + span * margin over the runner-up) * (1 - exp(-total / scale))
    # * (origin_base + origin_span * strongest weight): a clear, strong, origin signal nears 1, a
    # symptom-only one (weight 0.2-0.4) stays near 0.6 of that.
    net_margin_base: float = COIN
    net_margin_span: float = 0.45
    net_total_scale: float = 4.0
    net_origin_base: float = COIN
    net_origin_span: float = 1.0 - COIN
    # A cause's confidence is scaled by (1 - span + span * its share of the lost time): a cause that
    # explains all of it keeps its confidence, a minor one loses up to 30%.
    share_confidence_span: float = 0.3
    # A healthy step's confidence: base + span * how far below the slow threshold it is (0..1).
    healthy_confidence_base: float = COIN
    healthy_confidence_span: float = 1.0 - COIN
    # Share of ranks timed when the job has no placement (ranks unknown): half the usual trust.
    unplaced_timing_confidence: float = COIN
    # Never claim certainty: the engine infers from telemetry, it does not observe the cause.
    max_confidence: float = 0.99

    # -- background attribution (process_pending) ---------------------------------------------------
    # Telemetry counts as in for a step once the newest NIC sample is past its window (window_pad
    # after its end: the samples the answer reads are stored then, where a fixed 2 s margin waited
    # a second longer for the 1-s steps of a small job and no longer for the 5-s pad of a long step),
    # ...or once the step ended this long ago (a job without fresh telemetry must not wait forever).
    telemetry_stale_s: float = 120.0
    # NIC series probed for the telemetry horizon: a few suffice, each probe is an index lookup.
    horizon_probe_nics: int = 8
    # Steps attributed per background pass, so one backlogged job cannot starve the others.
    pending_limit: int = 5000

    # -- GPU and host evidence (devices.py) --------------------------------------------------------
    # An XID this long before the step still explains it: a GPU recovering from an error (page
    # retirement, a reset engine, a contained ECC error) runs slow for several steps after it.
    xid_lookback_s: float = 60.0
    # An XID this long before the step counts when the job's GPUs are scanned with no straggler to
    # point at one (a GPU picked from all must have logged around the step itself). (The state a
    # step ran in, link width or throttle flags that hold between readings, is no longer a fixed
    # look-back: DEVICE_SQL takes each series' last reading before the step, whatever its interval.)
    device_state_lookback_s: float = 5.0
    # A straggler whose own GPU/host telemetry agrees with the timings closes this share of the gap
    # to full confidence.
    device_evidence_boost: float = 0.3
    # Confidence of a GPU named from its telemetry alone (no straggler, no network anomaly), before
    # the margin over other GPUs: the finding is specific, but the timings did not point at it.
    gpu_scan_confidence: float = STRONG_CONFIDENCE

    # -- shared storage ------------------------------------------------------------------------------
    # A storage cause with no straggler (every rank's data phase grew alike) rises from
    # storage_without_straggler_confidence by up to this span with its evidence's strength
    # (1 - exp(-total / net_total_scale)) and its margin over the next storage candidate.
    storage_evidence_span: float = 0.35

    # -- sustained episodes (episode.py) ---------------------------------------------------------------
    # A step whose own evidence names nothing lists its episode's best-evidenced cause at this share
    # of that cause's confidence: the same event is likely, but this step's telemetry did not show it.
    episode_confidence_factor: float = INFERRED_SHARE
    # A step whose own top cause is under this confidence lists its episode's cause first when that,
    # scaled down as above, is stronger (episode.py: a coarse-sampled switch leaves some steps of a
    # long fault with only noise to show).
    episode_weak_confidence: float = WEAK_CONFIDENCE
    # A step under every timing bar inside a fault its noise hid is slow when its own window shows the
    # cause's own state (a gauge or an event of the component: causes.has_state_row), it is not far
    # under the level of the nearest slow steps either side (around.at_their_level), and those, up to
    # this many steps away with only unflagged or borderline steps between, name that cause
    # (engine._attribute). A +5 % PCIe downtrain in 1.5-2.6 % step noise leaves runs of up to 3-4
    # such steps between its corroborated ones; 0: off.
    fill_gap_steps: int = 4
    # ...and (that reach) only when the gap's other steps that no timing flags show the state too
    # (corroborate._state_throughout): a coarse sample that holds a second fault's first seconds
    # shows a volume's latency in the step just before it, and nothing in the gap's earlier steps.
    fill_gap_state_throughout: bool = True
    # ...or up to this many when the cause is a GPU whose own state alone slows it, as the device
    # reports it (causes.has_origin_state: its PCIe link trained down, a slowing throttle flag): such a
    # state lasts as long as its fault, where a volume's latency or a port's queue, read beside two
    # faults of one component, also rose a step before the second began. Off
    # with fill_gap_steps.
    fill_gap_origin_steps: int = 12
    # ...and a GPU fault's first or last step, under every bar but over the window's centre, whose
    # own span shows such a state of the GPU and whose nearest slow step, up to this many steps after
    # (before) it with none this far before (after) it, names that GPU (engine._attribute); 0: off.
    fill_edge_steps: int = 2
    # ...when the state covers at least this share of the step between its first and last reading in
    # it (devices.state_runs: the time it surely held): a fault that began late in the step, or ended
    # early in it, slowed it by under half its effect.
    fill_edge_share: float = MAJORITY
    # Steps of the episode attributed to find that cause when none is stored yet (a GET of an old
    # step): the ones the per-step test flagged, worst first; a few show the cause if any does.
    episode_max_donors: int = 3

    # Rule ids (rules/ids.py) the engine skips: how bench/ablation.py measures what each rule adds.
    # Not a tunable: the service runs with every rule on.
    disabled: frozenset[str] = frozenset()

    def window_pad(self, duration_s: float) -> float:
        """Seconds of telemetry read after a step of `duration_s` ends (window_pad_*)."""
        return min(max(self.window_pad_share * duration_s, self.window_pad_min_s), self.window_pad_max_s)

    def off(self, rule: str) -> bool:
        """Whether rule `rule` is switched off (an ablation)."""
        return rule in self.disabled


DEFAULT_CONFIG = EngineConfig()
