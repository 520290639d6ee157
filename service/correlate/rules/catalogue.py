"""Every decision rule of the engine: one id, one claim, its inputs, its precedence, its constants.

The catalogue is data: docs/correlation-engine.md's rule catalogue is generated from it
(`python -m fabricscope.service.correlate.rules`), tests check that every id the engine writes is
here and that every tunable constant of constants.py is owned by exactly one rule (or is plumbing:
caches, scan limits, SQL plan choices, which change speed and never an answer). Precedence orders
the rules as the engine applies them: evidence first, then the verdict, the rules that promote a
step under the bar or demote one only the sequential test flagged, then the cause and its
adjustments; within a family the first rule that holds decides.
"""

from __future__ import annotations

from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.model import Rule, Shared

C = "EngineConfig."
S = "SeqParams."

RULES: tuple[Rule, ...] = (
    # -- evidence ---------------------------------------------------------------------------------
    Rule(
        ids.EVIDENCE_PEERS,
        10,
        "A series is a signal when its window value stands out from its peer group (same role, metric and "
        "labels) by a robust z with a per-metric floor, and from its own recent past: a fault stands out "
        "from both, a busy hour from neither.",
        ("series in the step window", "peer groups", "localize.FLOORS", "localize.SIGNALS", "localize.PEAK_GAUGES"),
        (
            "MIN_SCORE",
            "PEER_MIN_Z",
            "NO_HISTORY_DISCOUNT",
            "SOLO_REL_FLOOR",
            "SOLO_FLOOR_SHARE",
            "LEVEL_FLOOR_MIN_SHARE",
        ),
    ),
    Rule(
        ids.EVIDENCE_WINDOW,
        11,
        "The step's window is its own span plus a pad into the next step (a fault's first second lands "
        "there) and its own history ends before a sustained episode, so a fault is never its own baseline; "
        "a link down counts a little after it ends, because transports stall after the carrier is back.",
        ("step start and duration", "episode of the step"),
        (
            C + "own_history_s",
            C + "own_history_gap_s",
            C + "episode_history_max_s",
            C + "window_pad_share",
            C + "window_pad_min_s",
            C + "window_pad_max_s",
            "AFTERMATH_S",
            "AFTERMATH_WEIGHT",
            "MAX_SAMPLE_GAP_S",
        ),
    ),
    # -- verdict ----------------------------------------------------------------------------------
    Rule(
        ids.VERDICT_HISTORY,
        100,
        "A step with too few healthy steps before it is not judged: a median of a handful moves with one "
        "odd step, and warm-up steps (compilation) are not the job's level.",
        ("step durations",),
        ("MIN_HISTORY", "BOOTSTRAP_MAX_RATIO", "WINDOW"),
    ),
    Rule(
        ids.VERDICT_BAR,
        101,
        "A step over its baseline by the larger of K robust sigmas and a relative floor is slow: healthy "
        "jitter is one or two sigmas, and under a few percent nobody loses real time.",
        ("step durations", "healthy window"),
        ("K_SIGMA", "REL", "MIN_SIGMA_REL"),
    ),
    Rule(
        ids.VERDICT_CHECKPOINT_BAR,
        102,
        "A checkpoint step is judged against the job's earlier checkpoint steps (their extra over an "
        "ordinary step), with the ordinary steps' bar as its floor: its write varies more than compute, "
        "and a checkpoint step twice as long as the earlier ones is slow however few there were.",
        ("step durations", "checkpoint phase or events"),
        ("CKPT_HISTORY", "CKPT_SPREAD_SHARE"),
    ),
    Rule(
        ids.VERDICT_SEQUENTIAL,
        103,
        "A small shift that lasts is slow: a one-sided CUSUM over consecutive steps proves a shift that no "
        "single step shows, and a segment ends when its evidence falls from its peak.",
        ("step durations", "healthy window"),
        (
            S + "shift",
            S + "shift_sigmas",
            S + "h",
            S + "cap",
            S + "h_end",
            S + "min_mean",
            S + "min_mean_se",
            S + "max_noise",
            S + "min_history",
            S + "drift_split_z",
            S + "onset_min",
            S + "pair_z",
            S + "pair_min",
            S + "ckpt_next_to_slow",
            S + "other_fault_ratio",
            S + "other_fault_quiet",
            "SEG_MEMBER_SIGMAS",
            "EPISODE_GAP_STEPS",
            "EPISODE_MIN_STEPS",
        ),
        switches=(S + "enabled", S + "reset_after_loud", S + "end_unproven", S + "split_quiet_prefix", S + "adaptive"),
    ),
    Rule(
        ids.BASELINE_NEW_LEVEL,
        20,
        "A flat run of slow steps longer than the longest fault that must be reported, with the job's usual "
        "noise, is the job's new level (a new training phase), not a fault.",
        ("step durations",),
        ("CHANGE_RUN", "CHANGE_HALF_AGREE", "CHANGE_SIGMA_RATIO"),
    ),
    Rule(
        ids.BASELINE_WRITE_BURST,
        21,
        "In a job that marks none of its checkpoints, a step whose volumes took a write burst far over what its "
        "ordinary steps write is a checkpoint step, and the time its ranks spent outside their recorded phases "
        "is its write: the checkpoint bar judges it and its written volume can be named.",
        ("volumes' written bytes", "step windows", "recorded phases"),
        ("CKPT_WRITE_BURST",),
    ),
    Rule(
        ids.VERDICT_UNDER_BAR,
        199,
        "A step under every bar that no promotion rule holds for is healthy, the surer the further under "
        "the bar it is.",
        ("step duration", "bar"),
        (C + "healthy_confidence_base", C + "healthy_confidence_span"),
    ),
    # -- promote ----------------------------------------------------------------------------------
    Rule(
        ids.PROMOTE_BORDERLINE,
        200,
        "A step over the noise but under the bar, or one phase of it over that phase's own noise (in any "
        "job, however noisy its step times), is slow when its own telemetry names a cause surely; the "
        "fainter the timing, the surer the telemetry, and beside a slow step only its own clocks count.",
        ("baseline flags", "step telemetry", "collective and data-phase timings"),
        (
            "BORDER_Z",
            "FAINT_Z",
            "FAINT_REL",
            "NEAR_SLOW_STEPS",
            "NET_TIMING_Z",
            "NET_TIMING_SHARE",
            C + "corroborate_min_confidence",
            C + "corroborate_faint_confidence",
            C + "net_min_share",
        ),
    ),
    Rule(
        ids.PROMOTE_STRAGGLER,
        201,
        "A step over its centre whose ranks waited for one straggler by a slow step's cost is slow when "
        "the telemetry of the straggler's host names it: the ranks' own clocks measured the loss.",
        ("rank timings", "step telemetry"),
        (C + "corroborate_straggler_loss",),
    ),
    Rule(
        ids.PROMOTE_ORIGIN_STATE,
        202,
        "A step whose ranks waited for one GPU that reports, in the step's own span, a state that alone "
        "slows it (a throttle flag, a PCIe link trained down) is slow: the device names the cause and "
        "the clocks its cost, ring hop included.",
        ("rank timings", "GPU state"),
        (C + "beside_straggler_loss",),
        switches=(C + "origin_state_straggler",),
    ),
    Rule(
        ids.PROMOTE_ERROR_RATE,
        203,
        "A borderline step whose ranks and ring both waited for one GPU whose error counters ran in the "
        "step (PCIe replays) is slow: a retrying link slows its GPU's work and its ring hop, and a "
        "sub-second downtrain shows only in the counters.",
        ("rank timings", "GPU error counters"),
        (),
        switches=(C + "error_rate_straggler",),
    ),
    Rule(
        ids.PROMOTE_BESIDE_SLOW,
        204,
        "A step beside a slow step is slow when its own clocks show the straggler that the slow step names: "
        "a fault's first or last step can hide its loss in noise, not its straggler.",
        ("rank timings", "neighbour answers"),
        (),
        switches=(C + "beside_ring_loss",),
    ),
    Rule(
        ids.PROMOTE_INSIDE_FAULT,
        205,
        "A step between slow steps that name one cause is slow when the cause's own state shows in it and "
        "in the gap's other steps: a fault that spans steps slows the ones its noise hid too.",
        ("neighbour answers", "component state"),
        (C + "fill_gap_steps",),
        switches=(C + "fill_gap_state_throughout",),
    ),
    Rule(
        ids.PROMOTE_INSIDE_FAULT_ORIGIN,
        206,
        "Further out, a step inside a GPU fault is slow when the GPU reports, in the step's own span, a "
        "state that alone slows it, and the slow steps either side name that GPU.",
        ("neighbour answers", "GPU state"),
        (C + "fill_gap_origin_steps",),
    ),
    Rule(
        ids.PROMOTE_FAULT_EDGE,
        207,
        "The first or last step of a GPU fault is slow when the GPU's own state covers most of the step "
        "and the slow steps next to it name that GPU; a state that began late in the step slowed it little.",
        ("neighbour answers", "GPU state runs"),
        (C + "fill_edge_steps", C + "fill_edge_share"),
    ),
    # -- demote -----------------------------------------------------------------------------------
    Rule(
        ids.DEMOTE_UNSURE_ONSET,
        300,
        "The onset of a shift that only the sequential test put in it, showing nothing of its own, is not "
        "slow and does not borrow its episode's cause: the onset is the least sure step of a shift.",
        ("sequential onset", "step answer"),
        (C + "episode_weak_confidence",),
    ),
    Rule(
        ids.DEMOTE_UNNAMED_LEVEL,
        301,
        "A later step of an unproven shift that ran at the job's level and names no cause is not slow: "
        "nothing says it lost time.",
        ("sequential flags", "step answer"),
        (),
        switches=(C + "unnamed_level_healthy",),
    ),
    Rule(
        ids.DEMOTE_UNTIMED,
        302,
        "A step only the sequential test flagged whose cause did not slow the phase that cause slows (a "
        "network cause with calm collectives, a straggler with calm local work) is not slow.",
        ("phase timings", "step answer"),
        (),
    ),
    # -- cause ------------------------------------------------------------------------------------
    Rule(
        ids.CAUSE_STRAGGLER,
        400,
        "In a synchronous collective the rank with the most local work (peer robust z) is the one everyone "
        "waited for: its GPU is the cause, as sure as its lead over its peers.",
        ("rank timings",),
        (
            "MIN_Z",
            "MIN_EXCESS_S",
            "WORK_MAD_FLOOR_REL",
            "WORK_MAD_FLOOR_S",
            C + "straggler_base",
            C + "straggler_span",
            C + "straggler_z_scale",
            C + "unplaced_timing_confidence",
        ),
        switches=(C + "measured_work_loss",),
    ),
    Rule(
        ids.CAUSE_HOST_STRAGGLER,
        401,
        "When most ranks of one host straggle together, or the straggler lost its time loading data, the "
        "host is the cause, not one GPU.",
        ("rank timings", "phases"),
        ("MEMBER_SHARE", "HOST_LEVEL_SHARE"),
    ),
    Rule(
        ids.CAUSE_STRAGGLER_VOLUME,
        402,
        "A straggler that lost its time reading data or writing its checkpoint, on a host whose volume "
        "stands out, names that volume (the one the job's checkpoints went to, for a write).",
        ("rank timings", "volume telemetry", "checkpoint volumes"),
        ("CKPT_MIN_Z",),
    ),
    Rule(
        ids.CAUSE_CHECKPOINT_UNOBSERVED,
        403,
        "A checkpoint straggler with no volume telemetry names the host's checkpoint volume from the "
        "timings alone, less surely.",
        ("rank timings", "checkpoint volumes"),
        (C + "checkpoint_without_telemetry_factor",),
    ),
    Rule(
        ids.CAUSE_WRITTEN_VOLUME,
        412,
        "At a checkpoint step the volumes written during the step are where the checkpoint went, whether "
        "or not the job posts checkpoint events: a host's own mount, or a storage system's volume every "
        "host writes to, is then named by its write latency as an evented checkpoint volume is.",
        ("write bytes and ops of the job's volumes", "checkpoint phase"),
        (),
    ),
    Rule(
        ids.CAUSE_SHARED_STORAGE,
        404,
        "When every rank lost far more local work than the straggler's own excess, what they share (the "
        "volume their loaders read) is the cause, and the straggler is the usual spread.",
        ("rank timings", "volume telemetry"),
        (C + "storage_data_share", C + "straggler_min_share"),
    ),
    Rule(
        ids.CAUSE_SHARED_UNOBSERVED,
        405,
        "Loaders that all lost their data phase alike, with no volume telemetry that stands out, name the "
        "shared volume they read during the step.",
        ("data-phase timings", "volumes read"),
        (),
    ),
    Rule(
        ids.CAUSE_VOLUME_SIGNAL,
        406,
        "With no straggler, a volume whose read (or, at a checkpoint step, write) latency stands out names "
        "the lost local work.",
        ("volume telemetry",),
        (C + "storage_without_straggler_confidence", C + "storage_evidence_span"),
    ),
    Rule(
        ids.CAUSE_NETWORK_SIGNAL,
        407,
        "Time lost in the collectives goes to the network component with the most weighted evidence: origin "
        "signals (a NIC out of buffer, a port's ECN marks) weigh more than symptoms, which point at their "
        "cause; confidence grows with the margin over the runner-up and with telemetry coverage.",
        ("switch and NIC telemetry", "localize.SIGNALS"),
        (
            C + "net_margin_base",
            C + "net_margin_span",
            C + "net_total_scale",
            C + "net_origin_base",
            C + "net_origin_span",
        ),
    ),
    Rule(
        ids.CAUSE_BACKPRESSURE,
        408,
        "Pause and credit-wait evidence moves upstream to the end of its chain: the port whose own queue "
        "fills, or the NIC that sent pause for lack of buffer, is the culprit, not the loudest victim.",
        ("pause, queue and xmit-wait signals", "links"),
        (),
    ),
    Rule(
        ids.CAUSE_RING_GPU,
        409,
        "Collective time lost with no network anomaly, while one GPU reports a state that alone slows it, "
        "goes to that GPU: the ring runs at the speed of its slowest hop.",
        ("GPU state of the job's GPUs",),
        (C + "gpu_scan_confidence", C + "device_state_lookback_s"),
    ),
    Rule(
        ids.CAUSE_UNREPORTED_GPU,
        410,
        "Local work lost with no straggler while some ranks sent no record of the step: the GPU among them "
        "whose own state slows it is the one everyone waited for.",
        ("missing rank records", "GPU state"),
        (),
    ),
    Rule(
        ids.CAUSE_EPISODE,
        411,
        "A slow step of a sustained episode whose own evidence names nothing, or only weakly, lists the "
        "cause its episode's best-evidenced step names, at a discount.",
        ("episode answers",),
        (C + "episode_confidence_factor", C + "episode_max_donors"),
    ),
    Rule(
        ids.CAUSE_UNKNOWN,
        499,
        "A slow step with no straggler and no anomalous telemetry is `unknown`, less sure the less "
        "telemetry covered the window.",
        ("telemetry coverage",),
        (C + "unknown_confidence", C + "unknown_coverage_floor"),
    ),
    # -- adjust -----------------------------------------------------------------------------------
    Rule(
        ids.ADJUST_SHARES,
        500,
        "The lost time splits into local work and network by the collectives' transfer time; each share "
        "over a floor is a cause, weighted by its share, and unexplained work while the network shows an "
        "anomaly is time waiting on the network.",
        ("step decomposition",),
        (C + "min_share", C + "share_confidence_span"),
    ),
    Rule(
        ids.ADJUST_DEVICE_EVIDENCE,
        501,
        "A straggler whose own GPU or host telemetry agrees (a throttle, an XID, CPU pressure) is surer.",
        ("GPU and host telemetry",),
        (C + "device_evidence_boost", C + "xid_lookback_s", C + "max_confidence"),
    ),
    Rule(
        ids.ADJUST_GPU_STATE_FIRST,
        502,
        "A GPU whose own state alone slows it heads a network cause it outscores: it slows the ring it "
        "sits in, so the collectives' share is its too. Not an earlier XID, an error count or a low clock.",
        ("causes", "GPU state"),
        (),
    ),
    Rule(
        ids.ADJUST_NEXT_TIMED,
        503,
        "A cause whose phase did not slow yields to the next named cause whose phase did.",
        ("causes", "phase timings"),
        (),
    ),
    Rule(
        ids.ADJUST_EDGE_SPREAD,
        504,
        "A slow step nothing else explains reads a coarse counter's edge sample at its even spread rather "
        "than as a change outside the window.",
        ("coarse samples at the window's edges",),
        (),
        switches=(C + "edge_spread_fallback",),
    ),
    Rule(
        ids.ADJUST_LAYER_FROM_KIND,
        505,
        "A component's kind fixes its layer: a host NIC is `nic`, a switch port `fabric` or `link`, a GPU "
        "`compute`, a volume `storage`; a host stands for its unplaced GPU or its unknown NIC.",
        ("topology roles",),
        (),
    ),
)

# Numbers several rules share because they state one principle: each rule keeps its own name for it
# (an alias a test or an ablation can vary alone), the value is chosen once.
SHARED: tuple[Shared, ...] = (
    Shared(
        "OUTLIER_Z",
        "An outlier stands three robust sigmas (or standard errors) out of its noise.",
        ("MIN_SCORE", "PEER_MIN_Z", "SEG_MEMBER_SIGMAS", S + "pair_z", S + "drift_split_z"),
    ),
    Shared(
        "SHIFT",
        "The least sustained regression that must be reported, and what a step over its own level "
        "by a fault's amount means.",
        (S + "shift", S + "pair_min", S + "ckpt_next_to_slow", S + "max_noise"),
    ),
    Shared(
        "MAJORITY",
        "A share of at least half is the larger part.",
        ("MEMBER_SHARE", "HOST_LEVEL_SHARE", "NET_TIMING_SHARE", C + "storage_data_share", C + "fill_edge_share"),
    ),
    Shared(
        "COIN",
        "A cause one kind of evidence cannot tell from its alternative starts at a coin toss and "
        "rises from there to certainty with its evidence.",
        (
            C + "storage_without_straggler_confidence",
            C + "unplaced_timing_confidence",
            C + "net_margin_base",
            C + "net_origin_base",
            C + "net_origin_span",
            C + "healthy_confidence_base",
            C + "healthy_confidence_span",
        ),
    ),
    Shared(
        "WEAK_CONFIDENCE",
        "The least confidence at which a named cause stands on its own.",
        (C + "corroborate_min_confidence", C + "episode_weak_confidence"),
    ),
    Shared(
        "STRONG_CONFIDENCE",
        "The confidence of a finding that a component's own telemetry makes specific.",
        (C + "corroborate_faint_confidence", C + "gpu_scan_confidence"),
    ),
    Shared(
        "INFERRED_SHARE",
        "A cause inferred without its own telemetry in the step keeps this share of its confidence.",
        (C + "checkpoint_without_telemetry_factor", C + "episode_confidence_factor"),
    ),
)

# Properties of the estimators, not choices: nothing to tune.
FACTS: tuple[str, ...] = ("MAD_TO_SIGMA", "MAD_SIGMA_SE")

# Constants that change speed or bookkeeping, never an answer: not tunable decision constants.
PLUMBING: tuple[str, ...] = (
    "SEQ_LOOKAHEAD_STEPS",
    "MAX_OUTLIERS",
    "BITMAP_MIN_SERIES",
    "BITMAP_MIN_SHARE",
    "BITMAP_MAX_SPAN",
    "FRAMES_MIN_SHARE",
    "NEXT_SCAN_S",
    C + "history_steps",
    C + "topo_ttl_s",
    C + "topo_rebuild_s",
    C + "topo_cache_size",
    C + "summary_cache_size",
    C + "final_lag_steps",
    C + "final_rank_share",
    C + "evidence_per_cause",
    C + "max_evidence_score",
    C + "telemetry_stale_s",
    C + "horizon_probe_nics",
    C + "pending_limit",
)
