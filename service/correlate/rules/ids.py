"""The rule ids the engine writes into an answer's `rules` (docs/API.md) and evidence rows.

Ids are stable: support tickets, dashboards and alert payloads quote them. Each has one entry in
catalogue.py saying what it claims and which constants it owns; a test checks that every id used
by the engine is catalogued and every catalogued id is used.
"""

from __future__ import annotations

# -- verdict: is the step slow? -----------------------------------------------------------------
VERDICT_HISTORY = "verdict.history"
VERDICT_BAR = "verdict.bar"
VERDICT_CHECKPOINT_BAR = "verdict.checkpoint_bar"
VERDICT_SEQUENTIAL = "verdict.sequential"
VERDICT_UNDER_BAR = "verdict.under_bar"
BASELINE_NEW_LEVEL = "baseline.new_level"
BASELINE_WRITE_BURST = "baseline.write_burst"

# -- promote: a step under the bar that was slowed all the same ----------------------------------
PROMOTE_BORDERLINE = "promote.borderline_telemetry"
PROMOTE_STRAGGLER = "promote.straggler_clocks"
PROMOTE_ORIGIN_STATE = "promote.origin_state_straggler"
PROMOTE_ERROR_RATE = "promote.error_rate_straggler"
PROMOTE_BESIDE_SLOW = "promote.beside_slow"
PROMOTE_INSIDE_FAULT = "promote.inside_fault"
PROMOTE_INSIDE_FAULT_ORIGIN = "promote.inside_fault_origin"
PROMOTE_FAULT_EDGE = "promote.fault_edge"

# -- demote: a step only the sequential test flagged that shows nothing of its own ----------------
DEMOTE_UNSURE_ONSET = "demote.unsure_onset"
DEMOTE_UNNAMED_LEVEL = "demote.unnamed_level"
DEMOTE_UNTIMED = "demote.untimed_cause"

# -- cause: which layer and component lost the time ----------------------------------------------
CAUSE_STRAGGLER = "cause.straggler"
CAUSE_HOST_STRAGGLER = "cause.host_straggler"
CAUSE_STRAGGLER_VOLUME = "cause.straggler_volume"
CAUSE_CHECKPOINT_UNOBSERVED = "cause.checkpoint_unobserved"
CAUSE_WRITTEN_VOLUME = "cause.written_volume"
CAUSE_SHARED_STORAGE = "cause.shared_storage"
CAUSE_SHARED_UNOBSERVED = "cause.shared_unobserved"
CAUSE_VOLUME_SIGNAL = "cause.volume_signal"
CAUSE_NETWORK_SIGNAL = "cause.network_signal"
CAUSE_BACKPRESSURE = "cause.backpressure"
CAUSE_RING_GPU = "cause.ring_gpu"
CAUSE_UNREPORTED_GPU = "cause.unreported_gpu"
CAUSE_EPISODE = "cause.episode"
CAUSE_UNKNOWN = "cause.unknown"

# -- adjust: rules that reorder, rename or re-weigh the causes found ------------------------------
ADJUST_SHARES = "adjust.shares"
ADJUST_DEVICE_EVIDENCE = "adjust.device_evidence"
ADJUST_GPU_STATE_FIRST = "adjust.gpu_state_first"
ADJUST_NEXT_TIMED = "adjust.next_timed"
ADJUST_EDGE_SPREAD = "adjust.edge_spread"
ADJUST_LAYER_FROM_KIND = "adjust.layer_from_kind"

# -- evidence: what counts as a signal in the step's window -------------------------------------
EVIDENCE_WINDOW = "evidence.window"
EVIDENCE_PEERS = "evidence.peers"
