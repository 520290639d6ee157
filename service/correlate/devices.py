"""GPU and host evidence: why a straggling GPU or host was slow, from its own telemetry.

The timings already say *which* rank everyone waited for; these rules say *why*, as evidence rows a
user can check: a throttled GPU (throttle flag, SM clock below its maximum), a downtrained PCIe link
(width or generation below the link's maximum), GPU errors (ECC, NVLink, PCIe replays), an XID logged
in or shortly before the step; a host whose CPU stalled (PSI pressure) or throttled. Rules are data
(`GPU_RULES`, `HOST_RULES`), like localize.SIGNALS; the functions here are pure (frames in, rows out),
the SQL is queries.device_rows / device_events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fabricscope.service.correlate.records import EvidenceRow

# Throttle reasons that slow a busy GPU. gpu_idle, applications_clocks and sync_boost are normal
# operation (an idle GPU drops its clocks on purpose) and must not count as evidence.
# sw_power_cap is left out too: a busy GPU at its power limit sets it all the time, by design.
SLOWING_REASONS = frozenset({"sw_thermal", "hw_thermal", "hw_slowdown", "hw_power_brake"})
XID_KIND = "gpu_xid"


@dataclass(frozen=True)
class Rule:
    """One check of a GPU or host series in the step window.

    test: `flag` (a 0/1 gauge is set in the window and was not in the source's own past),
    `below_ref` (the window's lowest value is under `scale` x the reference: the `ref` metric of the
    same source, e.g. the link's maximum width, or, when lower and `peers` is set, the median of the
    job's other GPUs in the same window),
    `above_hist` (a gauge over its own past by more than `scale`, in its unit),
    `rate_above` (a counter's rate over its own past by more than max(`scale`, 3 sigma), per second).
    `origin`: the finding alone explains a slow GPU, without a straggler in the timings (a GPU whose
    PCIe link trained down slows the ring it sits in, so every rank waits in the collectives).
    """

    metric: str
    test: str
    scale: float
    ref: str | None = None
    reasons: frozenset[str] | None = None  # flag: only series whose `reason` label is one of these
    origin: bool = False
    peers: bool = False  # below_ref: the job's other GPUs' median counts as a reference too


GPU_RULES: tuple[Rule, ...] = (
    Rule("gpu_throttle_active", "flag", 0.5, reasons=SLOWING_REASONS, origin=True),
    # Under a power cap a busy GPU runs somewhat under its maximum clock; 10% under the lower of its
    # maximum and its peers' clock in the same window is a throttle, not a power-capped normal.
    Rule("gpu_sm_clock_hz", "below_ref", 0.9, ref="gpu_sm_clock_max_hz", peers=True),
    Rule("pcie_link_width", "below_ref", 1.0, ref="pcie_link_width_max", origin=True),
    Rule("pcie_link_generation", "below_ref", 1.0, ref="pcie_link_generation_max", origin=True),
    Rule("gpu_temperature_celsius", "above_hist", 10.0),
    Rule("gpu_ecc_errors_total", "rate_above", 1.0),
    Rule("gpu_nvlink_errors_total", "rate_above", 10.0),
    Rule("pcie_replays_total", "rate_above", 5.0),
)
# The rules whose finding alone explains a slow GPU, as the device reports it (a PCIe link trained
# down, a slowing throttle flag): gpu_or_network's scan, and the engine's long gaps and fault edges.
ORIGIN_RULES = tuple(r for r in GPU_RULES if r.origin)
ORIGIN_METRICS = frozenset(r.metric for r in ORIGIN_RULES)
# A GPU's error counters (ECC, NVLink, PCIe replays): a rate over their own past is a link or a
# memory misbehaving now, where a gauge (a clock, a temperature) wobbles on a healthy GPU too.
ERROR_RATE_METRICS = frozenset(r.metric for r in GPU_RULES if r.test == "rate_above")
HOST_RULES: tuple[Rule, ...] = (
    # PSI: seconds stalled per second; 0.1 = tasks waited for CPU a tenth of the time more than usual.
    Rule("cpu_pressure_seconds_total", "rate_above", 0.1),
    Rule("memory_pressure_seconds_total", "rate_above", 0.1),
    Rule("io_pressure_seconds_total", "rate_above", 0.1),
    Rule("cpu_thermal_throttle_total", "rate_above", 1.0),
    Rule("softnet_dropped_total", "rate_above", 10.0),
)


def rule_metrics(rules: tuple[Rule, ...]) -> list[str]:
    """Every metric the rules read (their own and their references)."""
    return sorted({r.metric for r in rules} | {r.ref for r in rules if r.ref})


def _labels(text: object) -> dict[str, str]:
    return json.loads(text) if isinstance(text, str) and text not in ("", "null") else {}


def _row(r: Mapping[str, Any], value: float, baseline: float, score: float, unit: str) -> EvidenceRow:
    row: EvidenceRow = {
        "source": str(r["source"]),
        "metric": str(r["metric"]),
        "value": round(value, 6),
        "baseline": round(baseline, 6),
        "score": round(score, 2),
        "unit": unit,
    }
    labels = _labels(r["labels"])
    if labels:
        row["labels"] = labels
    return row


def _ok(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


def _in_state(rule: Rule, value: float, labels: object, ref: float | None) -> bool:
    """Whether one value is in the state a `flag` or `below_ref` rule looks for (`ref`: the
    reference a `below_ref` value must be under)."""
    if rule.test == "flag":
        return value >= rule.scale and (rule.reasons is None or _labels(labels).get("reason") in rule.reasons)
    return rule.test == "below_ref" and ref is not None and value < rule.scale * ref - 1e-9


def _check(rule: Rule, r: Mapping[str, Any], ref: float | None, peer: float | None) -> EvidenceRow | None:
    hval, hrate, hsig = r["hval"], r["hrate"], r["hsig"]
    if rule.test == "flag":
        past = float(hval) if _ok(hval) else 0.0
        if _ok(r["wmax"]) and _in_state(rule, float(r["wmax"]), r["labels"], None) and rule.scale > past:
            return _row(r, float(r["wmax"]), past, 10.0, "value")
        return None
    if rule.test == "below_ref":
        bases = [b for b in (ref, peer if rule.peers else None) if b is not None and b > 0]
        if not bases or not _ok(r["wmin"]):
            return None
        base = min(bases)
        if _in_state(rule, float(r["wmin"]), r["labels"], base):
            return _row(r, float(r["wmin"]), base, 100.0 * (base - float(r["wmin"])) / base, "value")
        return None
    if rule.test == "above_hist":
        if _ok(r["wmax"]) and _ok(hval) and r["wmax"] - hval > rule.scale:
            return _row(r, float(r["wmax"]), float(hval), (float(r["wmax"]) - float(hval)) / rule.scale, "value")
        return None
    # rate_above: a counter's rate against its own past (no past: against zero, the quiet state).
    if not _ok(r["wrate"]):
        return None
    past = float(hrate) if _ok(hrate) else 0.0
    spread = max(rule.scale, 3.0 * float(hsig)) if _ok(hsig) else rule.scale
    if r["wrate"] - past > spread:
        return _row(r, float(r["wrate"]), past, (float(r["wrate"]) - past) / spread, "per_second")
    return None


def judge(
    rows: pd.DataFrame, rules: tuple[Rule, ...], peers: dict[str, float] | None = None
) -> dict[str, list[tuple[Rule, EvidenceRow]]]:
    """Findings per source: `rows` from queries.device_rows (source, metric, labels, wmin, wmax, wrate,
    hval, hrate, hsig). A reference is the highest window value of the `ref` metric of the same source
    (without one, that metric's value in the source's own past);
    `peers`: metric -> the job's GPUs' median in the window (queries.peer_median)."""
    out: dict[str, list[tuple[Rule, EvidenceRow]]] = {}
    if rows.empty:
        return out
    # Plain dicts, not iterrows' Series or a groupby: the same native values and maxima (NaN skipped,
    # NaN when a source's metric has none) for the few rows of a step, at a fraction of the cost.
    records = rows.to_dict("records")
    refs: dict[tuple[object, object], float] = {}
    for r in records:
        key, v = (r["source"], r["metric"]), r["wmax"]
        cur = refs.setdefault(key, math.nan)
        if v is not None and v == v and (cur != cur or v > cur):  # x != x: NaN
            refs[key] = float(v)
    for r in records:
        # a capability (a link's maximum width) holds between its readings: when none describes the
        # window (a collector's gap in that series), its value in the source's own past
        key, v = (r["source"], r["metric"]), r["hval"]
        if refs[key] != refs[key] and v is not None and v == v:
            refs[key] = float(v)
    by_metric = {r.metric: r for r in rules}
    for r in records:
        rule = by_metric.get(str(r["metric"]))
        if rule is None:
            continue
        ref = refs.get((r["source"], rule.ref)) if rule.ref else None
        peer = (peers or {}).get(rule.metric)
        found = _check(rule, r, float(ref) if ref is not None and _ok(ref) else None, peer)
        if found is not None:
            out.setdefault(str(r["source"]), []).append((rule, found))
    for v in out.values():
        v.sort(key=lambda x: -x[1]["score"])
    return out


def state_runs(readings: pd.DataFrame, rules: tuple[Rule, ...]) -> list[tuple[float, float]]:
    """The spans of time in which the `flag` and `below_ref` rules find a state in `readings`
    (queries.readings: one source, oldest first), each from the first to the last of its consecutive
    readings in the state: the time it surely held. Not halfway to the readings either side: a 10-s
    reading dates a state's start or end no better than to 10 s, which is five steps (a downtrain
    that ended early in its last step would be dated to cover most of it). A `below_ref` reference is
    the highest reading of its `ref` metric."""
    if readings.empty:
        return []
    recs = readings.to_dict("records")
    refs: dict[str, float] = {}
    for r in recs:
        if _ok(r["value"]):
            refs[str(r["metric"])] = max(refs.get(str(r["metric"]), -math.inf), float(r["value"]))
    by_metric = {r.metric: r for r in rules if r.test in ("flag", "below_ref")}
    runs: list[tuple[float, float]] = []
    open_runs: dict[tuple[str, str], tuple[float, float]] = {}  # series -> (first, last) in the state
    for r in recs:
        rule = by_metric.get(str(r["metric"]))
        if rule is None or not _ok(r["value"]) or not _ok(r["ts"]):
            continue
        key, ts = (str(r["metric"]), str(r["labels"])), float(r["ts"])
        if _in_state(rule, float(r["value"]), r["labels"], refs.get(rule.ref) if rule.ref else None):
            open_runs[key] = (open_runs.get(key, (ts, ts))[0], ts)
        elif key in open_runs:
            runs.append(open_runs.pop(key))
    runs.extend(open_runs.values())
    return sorted(runs)


def covered(runs: list[tuple[float, float]], ws: float, we: float) -> float:
    """The most seconds of [ws, we] one of `runs` (state_runs) covers."""
    return max((max(0.0, min(b, we) - max(a, ws)) for a, b in runs), default=0.0)


def xid_rows(events: pd.DataFrame) -> dict[str, list[EvidenceRow]]:
    """One evidence row per GPU and XID code: kind `event`, the code in labels, value = how many."""
    out: dict[str, list[EvidenceRow]] = {}
    if events.empty:
        return out
    codes = [str(_labels(a).get("code", "")) for a in events["attrs"]]
    df = pd.DataFrame({"source": events["source"].astype(str), "code": codes})
    for (src, code), n in df.groupby(["source", "code"]).size().items():
        row: EvidenceRow = {
            "source": str(src),
            "metric": XID_KIND,
            "value": float(n),
            "baseline": 0.0,
            "score": 10.0,
            "unit": "events",
            "kind": "event",
        }
        if code:
            row["labels"] = {"code": code}
        out.setdefault(str(src), []).append(row)
    return out
