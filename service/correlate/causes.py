"""From a slow step's straggler and anomalous telemetry to its causes: which layer and component, how
confident, with which evidence. Pure functions over frames; the numbers come from `EngineConfig`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from fabricscope.service.correlate.constants import DEFAULT_CONFIG, MIN_SCORE, EngineConfig
from fabricscope.service.correlate.decompose import Straggler
from fabricscope.service.correlate.devices import ERROR_RATE_METRICS, ORIGIN_METRICS
from fabricscope.service.correlate.localize import PEAK_GAUGES, Topo, rank_candidates
from fabricscope.service.correlate.records import Attribution, CauseDraft, EvidenceRow, named
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import adjusted, caused, noted

NET_LAYERS = ("nic", "link", "fabric")
_PHASE_METRIC = {
    "compute": "compute_seconds",
    "data": "data_seconds",
    "checkpoint": "checkpoint_seconds",
    "optimizer": "optimizer_seconds",
}
CHECKPOINT_METRIC = _PHASE_METRIC["checkpoint"]


def evidence_rows(ev: pd.DataFrame, *, layer: str, component: str, n: int) -> list[EvidenceRow]:
    """The `n` strongest telemetry rows pointing at (layer, component), the component's own first: a
    congested queue's occupancy must show even when its victims' received pause scores higher."""
    sub = ev[(ev["layer"] == layer) & (ev["component"] == component)]
    own = sub["source"] == component
    sub = pd.concat([sub[own].nlargest(n, "score"), sub[~own].nlargest(n, "score")]).head(n)
    out = []
    for r in sub.itertuples(index=False):
        row: EvidenceRow = {
            "source": r.source,
            "metric": r.metric,
            "value": round(float(r.cur), 6),
            "baseline": round(float(r.baseline), 6),
            "score": round(float(r.score), 2),
        }  # type: ignore[typeddict-item]
        labels = json.loads(r.labels) if isinstance(r.labels, str) else {}
        if labels:
            row["labels"] = labels
        # counters (`_total`, docs/API.md) are compared as rates; gauges (queue bytes, latency) as values
        row["unit"] = "per_second" if r.metric.endswith("_total") else "value"
        out.append(row)
    return out


def unknown_cause(confidence: float) -> CauseDraft:
    return {"layer": "unknown", "component": None, "confidence": confidence, "evidence": [], "rule": ids.CAUSE_UNKNOWN}


@dataclass(frozen=True)
class LoaderLoss:
    """The ranks' median `data` phase of a step that lost its time there (baseline.py: data_timing,
    every loader alike, as a shared volume makes it): the step's value, its healthy median and spread."""

    value_s: float
    base_s: float
    sigma_s: float
    # the shared volumes the job's loaders read during the step (read ops or bytes counted)
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkLoss:
    """A step's local work as work_cause reads it: `data_s` its median `data` phase, `work_s` its
    lost local work (seconds; None when unknown), `loaders` set when the data phase itself lost the
    time, `ckpt_s` its median checkpoint write (at a checkpoint step)."""

    data_s: float | None = None
    work_s: float | None = None
    loaders: LoaderLoss | None = None
    ckpt_s: float | None = None


def _top_volume(pool: pd.DataFrame, ev: pd.DataFrame, cfg: EngineConfig, rule: str) -> CauseDraft:
    """The storage cause of `pool`'s (rank_candidates) strongest volume, built by cause rule `rule`."""
    comp = pool.iloc[0]["component"]
    return {
        "layer": "storage",
        "component": comp,
        "confidence": storage_confidence(pool, cfg),
        "evidence": evidence_rows(ev, layer="storage", component=comp, n=cfg.evidence_per_cause),
        "rule": rule,
    }


def work_cause(
    st: Straggler | None,
    ev: pd.DataFrame,
    topo: Topo,
    conf_t: float,
    cfg: EngineConfig = DEFAULT_CONFIG,
    loss: WorkLoss = WorkLoss(),
) -> CauseDraft:
    """Layer and component for excess local work (the thing everyone waited for), from the straggler
    `st` (None: none) whose timing confidence is `conf_t`, the step's anomalous telemetry `ev` and
    what its local work lost (`loss`)."""
    data_s, work_s, loaders, ckpt_s = loss.data_s, loss.work_s, loss.loaders, loss.ckpt_s
    n = cfg.evidence_per_cause
    storage = rank_candidates(ev, ("storage",)) if len(ev) else pd.DataFrame()
    reading = data_s is None or work_s is None or data_s >= cfg.storage_data_share * work_s
    # ...and the checkpoint's write, for a volume the job's checkpoints go to: the write can hold the
    # time such a volume cost as the reads hold a data volume's (one host's checkpoint volume several
    # times slower than its peers' can slow the step while the ranks' write times are too close for a
    # straggler)
    writing = (
        ckpt_s is not None and work_s is not None and ckpt_s >= cfg.storage_data_share * work_s and len(storage) > 0
    )
    written = storage[storage["component"].isin(topo.checkpoint_volumes)] if writing else storage.iloc[0:0]
    shared = storage[storage["component"].isin(topo.shared_volumes)] if len(storage) else storage
    all_lost = loaders.value_s - loaders.base_s if loaders is not None else 0.0
    if st is not None and work_s and (st.excess_s < cfg.straggler_min_share * work_s or all_lost > st.excess_s):
        # every rank lost far more local work than the straggler's own excess (or their loaders alone
        # lost more than it): what slowed them all (a shared volume they read from) is the cause, and
        # the straggler is the usual spread across ranks (a checkpoint step's slowest writer is a few
        # sigmas out on most steps); the straggler stays the answer when nothing shared can be named
        if len(shared) and reading:
            return _top_volume(shared, ev, cfg, ids.CAUSE_SHARED_STORAGE)
        unseen = _unobserved_shared(loaders, topo, cfg) if loaders is not None else None
        if unseen is not None:
            return unseen
    if st is None:
        pool = storage if len(storage) and reading else written
        if len(pool):
            return _top_volume(pool, ev, cfg, ids.CAUSE_VOLUME_SIGNAL)
        if loaders is not None:
            return _unobserved_shared(loaders, topo, cfg) or unknown_cause(cfg.unknown_confidence)
        return unknown_cause(cfg.unknown_confidence)
    source, timing = straggler_timing(st, cfg)
    strength = cfg.straggler_base + cfg.straggler_span * (1 - math.exp(-st.z / cfg.straggler_z_scale))
    conf = strength * conf_t
    if st.phase in ("data", "checkpoint"):
        mine = storage[storage["component"].map(topo.host_of).eq(st.host)] if len(storage) else storage
        if len(mine):
            shown = comp = mine.iloc[0]["component"]
            if st.phase == "checkpoint":
                # the volume the hook's events say the checkpoint went to, over the disk under it (the
                # storage agent reports both, and which shows the slow write more is a coin toss: in
                # the lab the throttled loop disk outscored its mount on 2 of 4 checkpoint steps); the
                # telemetry that showed it stays the evidence
                vols = sorted(v for v in topo.checkpoint_volumes if topo.host_of.get(v) == st.host)
                written = mine[mine["component"].isin(vols)]
                comp = written.iloc[0]["component"] if len(written) else (vols[0] if len(vols) == 1 else comp)
                shown = comp if len(written) else shown
            return {
                "layer": "storage",
                "component": comp,
                "confidence": conf,
                "evidence": [timing] + evidence_rows(ev, layer="storage", component=shown, n=n),
                "rule": ids.CAUSE_STRAGGLER_VOLUME,
            }
        if st.phase == "checkpoint":
            vols = sorted(s for s, h in topo.host_of.items() if h == st.host and topo.role.get(s) == "volume")
            written = [v for v in vols if v in topo.checkpoint_volumes]
            comp = written[0] if written else (vols[0] if len(vols) == 1 else st.host)
            unobserved = cfg.checkpoint_without_telemetry_factor * strength * conf_t
            return {
                "layer": "storage",
                "component": comp,
                "confidence": unobserved,
                "evidence": [timing],
                "rule": ids.CAUSE_CHECKPOINT_UNOBSERVED,
            }
    if st.phase == "data" or st.host_level:  # a loader's time, or most ranks of one host: the host
        return {
            "layer": "host",
            "component": st.host,
            "confidence": conf,
            "evidence": [timing],
            "rule": ids.CAUSE_HOST_STRAGGLER,
        }
    return {
        "layer": "compute",
        "component": source,
        "confidence": conf,
        "evidence": [timing],
        "rule": ids.CAUSE_STRAGGLER,
    }


def straggler_timing(st: Straggler, cfg: EngineConfig = DEFAULT_CONFIG) -> tuple[str, EvidenceRow]:
    """The straggler's source (its GPU, or its host when host-level) and its `timing` evidence row."""
    source = f"{st.host}:{st.gpu}" if (st.gpu and not st.host_level) else st.host
    return source, {
        "source": source,
        "metric": _PHASE_METRIC[st.phase],
        "value": round(st.value_s, 6),
        "baseline": round(st.peer_s, 6),
        "score": round(min(st.z, cfg.max_evidence_score), 2),
        "rank": st.rank,
        "unit": "seconds",
        "kind": "timing",
    }


def with_straggler_timing(
    causes: list[CauseDraft], st: Straggler | None, cfg: EngineConfig = DEFAULT_CONFIG
) -> list[CauseDraft]:
    """A cause named from its device's telemetry (the GPU scan, when the step's lost time looked like
    the network's) that is the straggler the ranks' own clocks show gets the straggler's `timing` row,
    and closes device_evidence_boost of its gap to full confidence: the two agree, as in
    device_probe.with_device_evidence (a straggler its device's telemetry confirms)."""
    if st is None:
        return causes
    source, timing = straggler_timing(st, cfg)
    return [
        {
            **c,
            "evidence": [timing, *c["evidence"]],
            "confidence": c["confidence"] + cfg.device_evidence_boost * (1.0 - c["confidence"]),
        }
        if c["component"] == source and not any(e.get("kind") == "timing" for e in c["evidence"])
        else c
        for c in causes
    ]


def _unobserved_shared(loaders: LoaderLoss, topo: Topo, cfg: EngineConfig) -> CauseDraft | None:
    """Every loader lost the time and no telemetry shows why (the volume's latency series missing, or
    its reading too coarse for the step): the shared volume the job's loaders read during the step
    (or, when they read several of one storage system, that system), at the confidence of a cause
    named from timings alone. None when there is nothing shared to name."""
    systems = {topo.host_of.get(v, v) for v in loaders.volumes}
    if not loaders.volumes or len(systems) > 1:
        return None
    comp = loaders.volumes[0] if len(loaders.volumes) == 1 else systems.pop()
    z = (loaders.value_s - loaders.base_s) / loaders.sigma_s if loaders.sigma_s > 0 else cfg.max_evidence_score
    timing: EvidenceRow = {
        "source": comp,
        "metric": _PHASE_METRIC["data"],
        "value": round(loaders.value_s, 6),
        "baseline": round(loaders.base_s, 6),
        "score": round(min(z, cfg.max_evidence_score), 2),
        "unit": "seconds",
        "kind": "timing",
    }
    conf = cfg.checkpoint_without_telemetry_factor * cfg.storage_without_straggler_confidence
    return {
        "layer": "storage",
        "component": comp,
        "confidence": conf,
        "evidence": [timing],
        "rule": ids.CAUSE_SHARED_UNOBSERVED,
    }


def storage_confidence(storage: pd.DataFrame, cfg: EngineConfig = DEFAULT_CONFIG) -> float:
    """A storage cause with no straggler (a shared volume slows every rank alike): from a coin
    toss up, with the evidence's strength and its margin over the next storage candidate."""
    total = float(storage.iloc[0]["total"])
    margin = 1.0 - (float(storage.iloc[1]["total"]) / total if len(storage) > 1 and total > 0 else 0.0)
    return cfg.storage_without_straggler_confidence + cfg.storage_evidence_span * margin * (
        1 - math.exp(-total / cfg.net_total_scale)
    )


def net_cause(ev: pd.DataFrame, coverage: float, cfg: EngineConfig = DEFAULT_CONFIG) -> CauseDraft:
    """The network component with the most weighted evidence; confidence grows with its margin over
    the runner-up, its total evidence and whether it shows origin (not only symptom) signals."""
    cands = rank_candidates(ev, NET_LAYERS) if len(ev) else pd.DataFrame()
    if cands.empty:
        return unknown_cause(cfg.unknown_confidence * max(coverage, cfg.unknown_coverage_floor))
    top = cands.iloc[0]
    second = float(cands.iloc[1]["total"]) if len(cands) > 1 else 0.0
    margin = 1.0 - second / float(top["total"])
    conf = (
        (cfg.net_margin_base + cfg.net_margin_span * margin)
        * (1 - math.exp(-float(top["total"]) / cfg.net_total_scale))
        * (cfg.net_origin_base + cfg.net_origin_span * float(top["origin"]))
    )
    mine = ev[(ev["layer"] == top["layer"]) & (ev["component"] == top["component"])]
    moved = "moved" in mine and bool(mine["moved"].fillna(False).astype(bool).any())
    return {
        "layer": top["layer"],
        "component": top["component"],
        "confidence": conf * coverage,
        "evidence": evidence_rows(ev, layer=top["layer"], component=top["component"], n=cfg.evidence_per_cause),
        "rule": ids.CAUSE_BACKPRESSURE if moved else ids.CAUSE_NETWORK_SIGNAL,
    }


def combine_causes(
    lost: float,
    w_share: float,
    n_share: float,
    work_cause: Callable[[], CauseDraft],
    net_cause: Callable[[], CauseDraft],
    cfg: EngineConfig = DEFAULT_CONFIG,
) -> list[CauseDraft]:
    """The causes of a slow step's lost time from its local-work and network shares (each cause is
    computed only when needed). Work that no rank straggled on and no volume explains, while the
    network shows an anomaly, is time waiting on the network outside the timed collectives
    (retransmission stalls before a collective starts, barriers): it goes to the network cause
    instead of becoming a second, unexplained one."""
    work = work_cause() if w_share >= cfg.min_share else None
    net = net_cause() if n_share >= cfg.min_share or work is not None else None
    if (
        work is not None
        and work["layer"] == "unknown"
        and net is not None
        and net["layer"] != "unknown"
        and not cfg.off(ids.ADJUST_SHARES)
    ):
        work, n_share = None, n_share + w_share
        noted(net, ids.ADJUST_SHARES)
    causes = []
    for share, c in ((w_share, work), (n_share, net)):
        if c is not None and share >= cfg.min_share:
            c["lost_s"] = lost * share
            c["confidence"] *= (1.0 - cfg.share_confidence_span) + cfg.share_confidence_span * share
            causes.append(c)
    return causes


def rank_causes(causes: list[CauseDraft]) -> list[CauseDraft]:
    """Worst first, but a cause the engine could not name (``unknown``: no straggler, no anomalous
    telemetry) never heads the answer over one it could: its lost time is only what the timings
    could not place (in the lab: time at a checkpoint barrier during a network fault). Equal losses
    (a slow step under its baseline lost none that can be measured) go by confidence, which carries
    each cause's share of the step's excess work or transfer time."""
    return sorted(causes, key=lambda c: (c["layer"] == "unknown", -c.get("lost_s", 0.0), -c.get("confidence", 0.0)))


def has_device_row(evidence: list[EvidenceRow], source: str | None = None) -> bool:
    """Whether `evidence` holds a sampled (not `timing`) row at MIN_SCORE, of `source` when given."""
    return any(
        e.get("kind") != "timing" and (e.get("score") or 0.0) >= MIN_SCORE and (source is None or e["source"] == source)
        for e in evidence
    )


def has_origin_state(evidence: list[EvidenceRow], source: str | None) -> bool:
    """Whether `evidence` holds a row at MIN_SCORE of a state of GPU `source` that alone slows it
    (devices.ORIGIN_METRICS: its PCIe link's width or generation under the link's maximum, a slowing
    throttle flag), as a device reports it."""
    return source is not None and any(
        e["source"] == source and e["metric"] in ORIGIN_METRICS and (e.get("score") or 0.0) >= MIN_SCORE
        for e in evidence
    )


def has_error_rate(evidence: list[EvidenceRow], source: str | None) -> bool:
    """Whether `evidence` holds a row of GPU `source`'s error counters running over their own past
    (devices.ERROR_RATE_METRICS: its rule fired, whatever the score: a few replays a second are
    already a link retrying)."""
    return source is not None and any(e["source"] == source and e["metric"] in ERROR_RATE_METRICS for e in evidence)


def has_state_row(evidence: list[EvidenceRow], source: str | None) -> bool:
    """Whether `evidence` holds a row at MIN_SCORE of `source`'s own state in the window: a gauge (a
    link's width, a throttle flag, a clock) or an event (an XID, which may have been logged up to
    xid_lookback_s before the window); not a counter's rate, which a coarse sample may hold from
    seconds outside the window (a link's flaps before and after it), nor a peak since the last read
    (PEAK_GAUGES: a queue's watermark), for the same reason."""
    return source is not None and has_device_row(
        [e for e in evidence if e.get("unit") not in ("per_second", "seconds") and e["metric"] not in PEAK_GAUGES],
        source,
    )


def gpu_state_first(causes: list[CauseDraft]) -> list[CauseDraft]:
    """`causes` (ranked) with a GPU cause ahead of a network cause that heads them less surely, when
    the GPU's own state that alone slows it is among its evidence (has_origin_state: a PCIe link
    trained down, a slowing throttle flag). Such a GPU slows the ring it sits in, so the
    collectives' share of the loss, which the network cause was given, is its too (a GPU's PCIe link
    trained down heads a link that merely flapped seconds before the step). Not for an XID logged
    before the step nor an error counter: neither says its ring hop is slow now (a straggling GPU
    whose XID came seconds before the step must not be named over a link that lost more time). Nor
    for a clock reading under its peers' with no throttle flag: a sample of a noisy gauge does not
    say the ring waited (one low clock sample must not put a GPU over congestion that lost more)."""
    if len(causes) < 2 or causes[0]["layer"] not in NET_LAYERS:
        return causes
    for c in causes[1:]:
        own = has_origin_state(c["evidence"], c["component"])
        if c["layer"] == "compute" and own and c["confidence"] > causes[0]["confidence"]:
            return [noted(c, ids.ADJUST_GPU_STATE_FIRST)] + [x for x in causes if x is not c]
    return causes


def first_timed(
    out: Attribution, untimed_of: Callable[[Attribution], EvidenceRow | None], *, yield_to_next: bool = True
) -> EvidenceRow | None:
    """Of a slow step's causes, the first whose phase shows it heads `out`: a cause that
    `untimed_of` finds did not slow the phase it slows by its nature (an `untimed` row) yields to
    the next named cause, whose answer `out` then gives, with the yielded cause's `untimed` row
    added to its evidence (a GPU straggler's onset, second to a port's concurrent congestion that
    its collectives did not show, is not made healthy with the port).
    Returns the `untimed` row of the last cause tried when none shows (the step is then not slow),
    None when one does."""
    untimed = untimed_of(out)
    while yield_to_next and untimed is not None and len(out["causes"]) > 1 and named(out["causes"][1]["layer"]):
        nxt = out["causes"][1]
        out.update(
            {
                "layer": nxt["layer"],
                "component": nxt["component"],
                "confidence": nxt["confidence"],
                "causes": out["causes"][1:],
                "evidence": [*out["evidence"], untimed],
            }
        )
        adjusted(out, ids.ADJUST_NEXT_TIMED)
        caused(out, nxt.get("rule"))
        untimed = untimed_of(out)
    return untimed


# -- GPU and host evidence ------------------------------------------------------------------------


def add_device_rows(cause: CauseDraft, rows: list[EvidenceRow], cfg: EngineConfig = DEFAULT_CONFIG) -> CauseDraft:
    """A straggler cause with its GPU's or host's own telemetry saying why: the rows follow the timing
    row, and the confidence rises (the timings and the device's telemetry agree)."""
    if not rows:
        return cause
    conf = cause["confidence"]
    return noted(
        {
            **cause,
            "confidence": conf + (1.0 - conf) * cfg.device_evidence_boost,
            "evidence": cause["evidence"] + rows[: cfg.evidence_per_cause],
            "adjust": list(cause.get("adjust", [])),
        },
        ids.ADJUST_DEVICE_EVIDENCE,
    )


def gpu_cause(findings: dict[str, list[EvidenceRow]], cfg: EngineConfig = DEFAULT_CONFIG) -> CauseDraft | None:
    """Time lost in the collectives with no network anomaly, while one GPU of the job shows an origin
    finding (PCIe link trained down, throttled, an XID): the ring runs at the speed of that GPU. The
    strongest finding wins; several GPUs at once lower the confidence by the margin."""
    if not findings:
        return None
    strength = sorted(((sum(r["score"] for r in rows), src) for src, rows in findings.items()), reverse=True)
    total, src = strength[0]
    second = strength[1][0] if len(strength) > 1 else 0.0
    conf = cfg.gpu_scan_confidence * (cfg.net_margin_base + cfg.net_margin_span * (1.0 - second / total))
    return {
        "layer": "compute",
        "component": src,
        "confidence": conf,
        "rule": ids.CAUSE_RING_GPU,
        "evidence": findings[src][: cfg.evidence_per_cause],
    }


def merge_same(causes: list[CauseDraft]) -> list[CauseDraft]:
    """Causes naming the same (layer, component) — a GPU that both straggled and slowed the ring — are
    one cause: lost time added, the higher confidence, evidence once."""
    out: dict[tuple[str, str | None], CauseDraft] = {}
    for c in causes:
        key = (c["layer"], c["component"])
        if key not in out or c["layer"] == "unknown":
            out[key if c["layer"] != "unknown" else (f"unknown{len(out)}", None)] = c
            continue
        m = out[key]
        seen = {(e["source"], e["metric"], json.dumps(e.get("labels"), sort_keys=True)) for e in m["evidence"]}
        extra = [
            e
            for e in c["evidence"]
            if (e["source"], e["metric"], json.dumps(e.get("labels"), sort_keys=True)) not in seen
        ]
        out[key] = {
            **m,
            "confidence": max(m["confidence"], c["confidence"]),
            "evidence": m["evidence"] + extra,
            "lost_s": m.get("lost_s", 0.0) + c.get("lost_s", 0.0),
            "adjust": [*m.get("adjust", []), *(a for a in c.get("adjust", []) if a not in m.get("adjust", []))],
        }
    return list(out.values())
