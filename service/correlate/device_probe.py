"""The engine's GPU and host look-ups: the straggler's own telemetry, a scan of the job's GPUs
when collective time has no network explanation, and look-back evidence yielding to the step's own.
The rules are devices.py's tables, the SQL queries.py's; this module only joins them to a step."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.causes import add_device_rows, gpu_cause
from fabricscope.service.correlate.constants import DEFAULT_CONFIG, MAX_SAMPLE_GAP_S, EngineConfig
from fabricscope.service.correlate.devices import (
    GPU_RULES,
    HOST_RULES,
    ORIGIN_RULES,
    XID_KIND,
    Rule,
    covered,
    judge,
    rule_metrics,
    state_runs,
    xid_rows,
)
from fabricscope.service.correlate.localize import Topo
from fabricscope.service.correlate.records import CauseDraft, EvidenceRow
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import tagged

Window = tuple[float, float]


def device_findings(
    conn: Any,
    sources: list[str],
    rules: tuple[Rule, ...],
    win: Window,
    xid_lookback_s: float | None,
    peers: list[str] | None = None,
    cfg: EngineConfig = DEFAULT_CONFIG,
) -> dict[str, list[EvidenceRow]]:
    """Rule findings per GPU/host source in the step window, strongest first, after the XIDs logged
    since `xid_lookback_s` before the step (None: no XIDs); `peers`: the job's GPUs, for the rules
    that compare a GPU with the others."""
    ws, we = win
    # the readings that describe the step (the last state before it, the rate covering its end)
    # are found per series by DEVICE_SQL, whatever each series' interval; no fixed look-back.
    hs, he = ws - cfg.own_history_s, ws - cfg.own_history_gap_s
    rows = q.device_rows(conn, sources=sources, metrics=rule_metrics(rules), ws=ws, we=we, hs=hs, he=he)
    peer: dict[str, float] = {}
    for rule in rules:
        v = q.peer_median(conn, sources=peers, metric=rule.metric, ws=ws, we=we) if rule.peers and peers else None
        if v is not None:
            peer[rule.metric] = v
    out = {src: [row for _, row in found] for src, found in judge(rows, rules, peer).items()}
    if xid_lookback_s is not None:
        events = q.device_events(conn, sources=sources, kinds=[XID_KIND], es=ws - xid_lookback_s, we=we)
        for src, ev_rows in xid_rows(events).items():
            out[src] = ev_rows + out.get(src, [])
    return out


def origin_cover(conn: Any, gpu: str, win: Window, cfg: EngineConfig = DEFAULT_CONFIG) -> float:
    """How many seconds of `win` GPU `gpu` spent in a state that alone slows it (its PCIe link trained
    down, a slowing throttle flag: GPU_RULES' `origin` rules) for sure: between its first and last
    reading in the state (devices.state_runs), from as far back and ahead as a reading describes the
    window. A capability with no reading there (a collector's gap) is read from the GPU's own past,
    as devices.judge does."""
    ws, we = win
    rows = q.readings(
        conn, source=gpu, metrics=rule_metrics(ORIGIN_RULES), fs=ws - MAX_SAMPLE_GAP_S, ts=we + MAX_SAMPLE_GAP_S
    )
    gaps = sorted({r.ref for r in ORIGIN_RULES if r.ref} - set(rows["metric"])) if len(rows) else []
    if gaps:
        past = q.readings(conn, source=gpu, metrics=gaps, fs=ws - cfg.own_history_s, ts=ws - MAX_SAMPLE_GAP_S)
        rows = pd.concat([past, rows], ignore_index=True) if len(past) else rows
    return covered(state_runs(rows, ORIGIN_RULES), ws, we)


def _gpus(topo: Topo) -> list[str]:
    return [s for s, r in topo.role.items() if r == "gpu"]


def with_device_evidence(
    conn: Any, cause: CauseDraft, topo: Topo, win: Window, cfg: EngineConfig = DEFAULT_CONFIG
) -> CauseDraft:
    """A compute straggler gets its GPU's evidence, a host straggler its host's."""
    comp = cause["component"]
    role = topo.role.get(comp or "")
    if cause["layer"] == "compute" and comp and role == "gpu":
        found = device_findings(conn, [comp], GPU_RULES, win, cfg.xid_lookback_s, peers=_gpus(topo), cfg=cfg)
    elif cause["layer"] == "host" and comp and role == "host":
        found = device_findings(conn, [comp], HOST_RULES, win, None, cfg=cfg)
    else:
        return cause
    return add_device_rows(cause, found.get(comp, []), cfg)


def unreported_gpu(
    conn: Any, cause: CauseDraft, gpus: list[str], win: Window, cfg: EngineConfig = DEFAULT_CONFIG
) -> CauseDraft:
    """Local work lost with no straggler to name, while the ranks on `gpus` sent no record of the
    step (a hook's post lost): the rank everyone waited for may be one of them, and its GPU's own
    state (a throttle flag, a PCIe link trained down, an XID) names it, as the scan of
    gpu_or_network does for a ring's loss. Only their GPUs are read: the others' timings are there
    and show no straggler (else a throttled GPU whose rank record was lost leaves its slow step
    `unknown`)."""
    found = _origin_scan(conn, cause, gpus, win, cfg)
    return found if found is cause else tagged(found, ids.CAUSE_UNREPORTED_GPU)


def _origin_scan(conn: Any, cause: CauseDraft, gpus: list[str], win: Window, cfg: EngineConfig) -> CauseDraft:
    """`cause` when it names something; else the GPU of `gpus` whose own state alone slows it (the
    origin rules), when one does. An XID long before the step may explain a GPU the timings point at
    (straggler path), but not one picked from several: here only XIDs around the step itself count."""
    if cause["layer"] != "unknown" or not gpus:
        return cause
    found = device_findings(conn, gpus, ORIGIN_RULES, win, cfg.device_state_lookback_s, cfg=cfg)
    return gpu_cause(found, cfg) or cause


def gpu_or_network(
    conn: Any, cause: CauseDraft, topo: Topo, win: Window, cfg: EngineConfig = DEFAULT_CONFIG, *, scan: bool
) -> CauseDraft:
    """Collective time with no network anomaly: a GPU whose link trained down, that throttles or
    logged an XID slows the ring it sits in; name it when one does. `scan`: the collectives hold
    enough of the lost time to be listed (otherwise the job's GPUs are not queried at all)."""
    if not scan:
        return cause
    return _origin_scan(conn, cause, _gpus(topo), win, cfg)
