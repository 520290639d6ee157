"""Whether a step under the slow bar was slowed all the same (engine._attribute's not-slow branch):
its own telemetry names a cause surely enough (a borderline step), its ranks' own clocks show a
straggler, or it sits inside a fault that spans steps whose neighbours name the cause its telemetry
names. The engine injects what needs the database: `explain` (its telemetry), `between` (the
neighbours' answers), `straggler` (its rank rows) and `cover` (a GPU's state over the step)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fabricscope.service.correlate.around import at_their_level, slow_around, slow_beside, slow_near
from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.causes import (
    CHECKPOINT_METRIC,
    NET_LAYERS,
    has_device_row,
    has_error_rate,
    has_origin_state,
    has_state_row,
)
from fabricscope.service.correlate.constants import FAINT_REL, EngineConfig
from fabricscope.service.correlate.decompose import Straggler
from fabricscope.service.correlate.records import Attribution, EvidenceRow
from fabricscope.service.correlate.rules import ids

STORAGE_ONLY = ("storage",)
CauseKey = tuple[str, str | None]  # an answer's (layer, component)
Sides = tuple[list[int], ...]  # the steps before and after a step that may be slow (around.slow_around)
Explain = Callable[[Attribution, bool, bool], None]  # (into, corroborating, own_span): engine._explain


def step_row(source: str, d: float, base: float, sigma: float, kind: str) -> EvidenceRow:
    """The evidence row of a step's own time against its baseline (its excess in sigmas), which says
    why the step time alone did not decide (`kind`: corroborated, onset)."""
    return {"source": source, "metric": "step_duration_seconds", "value": round(d, 6), "baseline": round(base, 6),
            "score": round((d - base) / max(sigma, 1e-9), 3), "unit": "seconds", "kind": kind}


def holds_its_share(rows: list[Any], excess: float, share: float) -> bool:
    """Whether a timing row of `rows` holds `share` of the step's `excess` (seconds over its baseline):
    a straggler whose own excess is a small part of what the step lost did not make the step slow
    (the ranks' usual spread has a few-sigma rank on many healthy steps; causes.work_cause weighs a
    slow step's straggler by the same share)."""
    return excess <= 0.0 or any(e.get("kind") == "timing"
                                and float(e["value"]) - float(e.get("baseline") or 0.0) >= share * excess
                                for e in rows)


def only_layers(bl: Baselines, i: int) -> tuple[str, ...]:
    """The layers that alone may corroborate step `i` (empty: any): a step over only in one phase."""
    return NET_LAYERS if bl.net_only[i] else STORAGE_ONLY if bl.data_only[i] else ()


@dataclass(frozen=True)
class Probes:
    """What the rules ask the database about step `i`: its telemetry's answer (`explain`), whether
    the steps either side (or on the sides given) are slow with a cause (`between`), the straggler its
    own rank timings show lost time (`straggler`, None: none) and how much of a span a GPU's origin
    state covers (`cover`, seconds)."""

    explain: Explain
    between: Callable[[CauseKey, Sides | None], bool]
    straggler: Callable[[], tuple[Straggler, float] | None]
    cover: Callable[[str, tuple[float, float]], float]
    # whether row k's own window shows a component's own state (causes.has_state_row); None: not asked
    state_at: Callable[[int, str], bool] | None = None


def hidden_slow(out: Attribution, *, bl: Baselines, summ: pd.DataFrame, i: int, cfg: EngineConfig,
                host_of: dict[str, str], probes: Probes, borrow: bool) -> str | None:
    """The promotion rule (rules/ids.py) by which step `i` of `summ`, under the slow bar, was slowed
    all the same, None when none holds; `out` is then its attribution. `borrow`: the step may ask its
    neighbours (not when it is itself a neighbour asked)."""
    row = summ.iloc[i]
    d, start = float(row["dur"]), float(row["start"])
    base, sigma = float(bl.base[i]), float(bl.sigma[i])
    faint, ck_faint, own = bool(bl.faint[i]), bool(bl.ckpt_faint[i]), bool(bl.near_slow[i])
    need = cfg.corroborate_faint_confidence if faint else cfg.corroborate_min_confidence
    checkpoint = bool(row["ckpt_max"] > 0)

    def judge(into: Attribution, **kw: Any) -> bool:
        return corroborated(into, probes.explain, cfg=cfg, base=base, sigma=sigma, host_of=host_of, **kw)

    def named_by(sides: Sides | None = None) -> Callable[[CauseKey], bool]:
        return lambda c: probes.between(c, sides)

    # a faint or near-slow step between two slow steps that name one cause: inside that fault (it
    # spans steps), so its telemetry need only name the same cause (the neighbours' answers are
    # computed without this rule: no chain of them)
    ok = bool(bl.borderline[i]) and not cfg.off(ids.PROMOTE_BORDERLINE) and judge(
        out, need=need, own_timing=own or ck_faint, own_device=ck_faint,
        between=named_by() if borrow and (faint or own) else None, net_timing=bool(bl.net_timing[i]),
        data_timing=bool(bl.data_timing[i]), only_layers=only_layers(bl, i),
        net_lost=bl.transfer_lost(i, row["transfer"]))
    if ok:
        return ids.PROMOTE_BORDERLINE

    def straggler(share: float, ring: bool = False) -> Straggler | None:
        # what a fault can slow at a checkpoint step is the step less its write: the same loss is a
        # smaller share of a checkpoint step's baseline (a host's +4.2 % loss is under 4 % of a
        # checkpoint step's). A bar of inf is the rule off: no rank rows read.
        if not math.isfinite(share):
            return None
        got = probes.straggler()
        if got is None:
            return None
        work = base - (float(row["ckpt_med"]) if checkpoint and pd.notna(row["ckpt_med"]) else 0.0)
        return got[0] if got[1] + (ring_loss(got[0]) if ring else 0.0) >= share * work else None

    def ring_loss(st: Straggler) -> float:
        # one GPU's fault may sit in its hop of the ring too (a PCIe link trained down), which the
        # ranks' wait for its work does not hold (EngineConfig.beside_ring_loss)
        return bl.transfer_lost(i, row["transfer"]) if st.gpu and not st.host_level else 0.0

    def gpu_judged(st: Straggler | None, **state: bool) -> bool:
        # one GPU the ranks waited for (not a host), whose own span's telemetry names it with `state`
        return (st is not None and st.gpu is not None and not st.host_level
                and judge(out, need=cfg.corroborate_min_confidence, own_timing=True, own_span=True, **state))

    over_centre = d > float(bl.centre[i])
    if not ok and over_centre and not checkpoint and not cfg.off(ids.PROMOTE_STRAGGLER):
        # its timing alone decided nothing: the ranks' own clocks may still show what it hid
        ok = (straggler(cfg.corroborate_straggler_loss) is not None
              and judge(out, need=cfg.corroborate_min_confidence, own_timing=True))
        if ok:
            return ids.PROMOTE_STRAGGLER
    if (not ok and (bool(bl.borderline[i]) or over_centre) and not checkpoint and cfg.origin_state_straggler
            and not cfg.off(ids.PROMOTE_ORIGIN_STATE)):
        # a borderline step whose ranks waited for one GPU that reports, in the step's own span, a
        # state that alone slows it (a throttle flag, a PCIe link trained down): the device's own
        # signal names the cause and the ranks' clocks its cost, as a faint step's telemetry and a
        # slow neighbour would (a throttle's step under the bar whose ranks waited ~3 % for the GPU
        # while its ring lost more). A step under the borderline bar needs the cost of a slow step (REL)
        # on those clocks: a downtrain's last step whose wait and ring loss reach it is slow, the
        # fault's tail after it is not (no neighbour rule)
        share = cfg.beside_straggler_loss if bl.borderline[i] else cfg.corroborate_straggler_loss
        ok = gpu_judged(straggler(share, ring=cfg.beside_ring_loss), origin_state=True)
        if ok:
            return ids.PROMOTE_ORIGIN_STATE
    if (not ok and bool(bl.borderline[i]) and not checkpoint and cfg.error_rate_straggler
            and not cfg.off(ids.PROMOTE_ERROR_RATE)):
        # ...or whose ranks waited for one GPU, and whose ring lost time too, a slow step's cost
        # together (corroborate_straggler_loss), while that GPU's error counters ran in the step's
        # own span (PCIe replays): a link retrying slows both its GPU's work and its ring hop, which
        # a compute straggler's clocks do not. A PCIe link trained down for under a second of a step
        # is missed by a state read every 2-10 s; its replays are counted (a one-step downtrain
        # under +4 %, its GPU several sigmas out)
        ok = gpu_judged(straggler(cfg.corroborate_straggler_loss, ring=True), error_rate=True)
        if ok:
            return ids.PROMOTE_ERROR_RATE
    near = slow_near(bl, summ, i, 1) if borrow and not ok and not cfg.off(ids.PROMOTE_BESIDE_SLOW) else None
    if near is not None:
        # beside a slow step, or between two: the step's noise can hide the fault's loss whole (a
        # step at its baseline, the fault's first or last step, a checkpoint step), but the ranks'
        # own clocks still show the straggler; it counts when it is the cause the slow steps beside
        # it name
        st = straggler(cfg.beside_straggler_loss, ring=cfg.beside_ring_loss)
        ok = st is not None and judge(out, need=cfg.corroborate_min_confidence, between=named_by(near),
                                      require_between=True, straggler_host=st.host)
        if ok:
            return ids.PROMOTE_BESIDE_SLOW
    # the rules below fill in a fault that spans steps; not at a checkpoint step (ckpt_faint above)
    spans = borrow and not checkpoint
    tried: list[Sides] = []
    for reach, far in ((cfg.fill_gap_steps, False), (cfg.fill_gap_origin_steps, True)):
        # inside a fault that spans steps, whose cause's own device still shows it in this step's
        # window (a PCIe link trained down, a throttle): the fault slowed this step as it did the
        # steps either side, whatever the step's noise did with the loss (a +4 % downtrain in 2.6 %
        # noise: 4 of its 13 steps read under every bar, one under the baseline). The nearest slow
        # steps either side, up to fill_gap_steps away, must name it (then up to fill_gap_origin_steps
        # for a GPU's own state that alone slows it, read in the step's own span: not the next step's
        # first second, where a fault may begin); a step far under their level is between two
        # faults, not inside one.
        rule = ids.PROMOTE_INSIDE_FAULT_ORIGIN if far else ids.PROMOTE_INSIDE_FAULT
        around = (slow_around(bl, summ, i, reach) if spans and cfg.fill_gap_steps > 0 and not ok and not cfg.off(rule)
                  else None)
        if around is None or around in tried or not at_their_level(bl, summ, i, around):
            continue
        tried.append(around)
        gap: Attribution = {**out}
        ok = (judge(gap, need=cfg.corroborate_min_confidence, require_between=True, own_state=True,
                    own_span=far, origin_state=far, between=named_by(around))
              and (far or not cfg.fill_gap_state_throughout
                   or _state_throughout(probes, summ, i, around, str(gap["component"]))))
        if ok:
            out.update(gap)
            return rule
    edge = (slow_beside(bl, summ, i, cfg.fill_edge_steps) if spans and not ok and not cfg.off(ids.PROMOTE_FAULT_EDGE)
            else None)
    if edge is not None and at_their_level(bl, summ, i, edge, over_centre=True):
        # the first or last step of a GPU's fault whose own state says it is slowed (its PCIe link
        # trained down, a throttle flag) in the step's own span (not the next step's first second,
        # where the fault may have begun) and whose slow steps right after or before it name that
        # GPU. Not other causes' gauges nor a GPU's clock in the step: a volume's latency and a
        # straggler's time were high in the steps before their faults began often enough to make such
        # a rule flag healthy steps). The state must cover, between its first and last reading in it,
        # most of the step (fill_edge_share): a fault that began late in the step, or ended early in
        # it, slowed it little, and a 10-s reading dates neither.
        trial: Attribution = {**out}
        ok = (judge(trial, need=cfg.corroborate_min_confidence, require_between=True, origin_state=True,
                    own_span=True, between=named_by(edge))
              and probes.cover(str(trial["component"]), (start, start + d)) >= cfg.fill_edge_share * d)
        if ok:
            out.update(trial)
            return ids.PROMOTE_FAULT_EDGE
    return None


def _state_throughout(probes: Probes, summ: pd.DataFrame, i: int, around: Sides, component: str) -> bool:
    """Whether the other steps of the gap around row `i` that no timing flags (those between the far
    steps of its two sides) show `component`'s state too. A volume's latency or a port's queue read
    over a coarse span that holds a second fault's first seconds shows the state in the step just
    before it, and nothing in the gap's earlier steps: two faults of one component, not one fault
    the noise hid (the step before a volume's second slowdown, at +0.8 %, is not filled)."""
    if probes.state_at is None:
        return True
    steps = summ["step"].to_numpy(int)
    lo, hi = min(min(side) for side in around), max(max(side) for side in around)
    step_i = int(steps[i])
    rows = [i + s - step_i for s in range(lo + 1, hi) if s != step_i]
    return all(probes.state_at(k, component) for k in rows if 0 <= k < len(steps))


def corroborated(out: Attribution, explain: Explain, *, cfg: EngineConfig, base: float, sigma: float, need: float,
                 own_timing: bool = False, own_device: bool = False, host_of: dict[str, str] | None = None,
                 between: Callable[[CauseKey], bool] | None = None, net_timing: bool = False,
                 data_timing: bool = False, only_layers: tuple[str, ...] = (), require_between: bool = False,
                 straggler_host: str | None = None, own_state: bool = False, own_span: bool = False,
                 origin_state: bool = False, net_lost: float | None = None, error_rate: bool = False) -> bool:
    """A borderline step (over the noise, under the bar) is slow when its own telemetry names a cause
    with confidence `need` (corroborate_min_confidence, or corroborate_faint_confidence for a faint
    one): `out` is then that attribution, with an evidence row `kind: corroborated` saying the timing
    alone did not decide.

    - `own_timing`: only a cause resting on the step's own rank timings (a straggler's `timing` row)
      counts, not sampled telemetry (baseline.py: near_slow); `own_device`: and a telemetry row of that
      host's own devices too, or a straggler outside the checkpoint write (baseline.py: ckpt_faint).
    - `host_of` (Topo.host_of): which host a component or a timing row's source is on.
    - `between`: whether the steps either side are slow with the draft's (layer, component); when they
      are, the draft needs only corroborate_min_confidence and no timing row of its own.
    - `net_timing`: the step's own collectives lost the time to the network (constants.NET_TIMING_Z):
      a network cause then needs only corroborate_min_confidence and counts as the step's own timing
      and device (a checkpoint step's link loss shows in its collectives, not in a host's write);
      `data_timing`: the same of its ranks' `data` phase, for a storage cause (a shared volume has no
      straggler).
    - `only_layers`: only a cause of these layers, resting on the matching phase's own timing, can
      corroborate (baseline.py: net_only and data_only, a step over only in one phase).
    - `require_between`: the draft must also be the cause of the steps either side (`between`), and
      its component on `straggler_host` (the host of the straggler the step's own rank timings show).
    - `own_state`: the draft's evidence must hold a row of its component's own state in the window
      (causes.has_state_row: a gauge or an event of the component itself); `own_span`: read from the
      step's own span only, without the next step's first second (engine._explain); `origin_state`:
      a row of a GPU's own state that alone slows it (causes.has_origin_state: its PCIe link trained
      down, a throttle flag); `net_lost`: seconds the step's collectives lost over their baseline
      (Baselines.transfer_lost; None: not asked): a network cause whose step's collectives lost under
      `net_min_share` of what the step lost does not corroborate it alone; `error_rate`: a row of
      the GPU's own error counters running (causes.has_error_rate: PCIe replays, NVLink, ECC)."""
    if not 0.0 < need <= 1.0 or not 0.0 < cfg.corroborate_min_confidence <= 1.0:
        return False
    draft: Attribution = {**out, "slow": True, "evidence": [], "causes": []}
    explain(draft, True, own_span)
    if draft["layer"] == "unknown" or draft["confidence"] < cfg.corroborate_min_confidence:
        return False
    if own_state and not has_state_row(draft["evidence"], draft["component"]):
        return False
    if origin_state and not has_origin_state(draft["evidence"], draft["component"]):
        return False
    if error_rate and not has_error_rate(draft["evidence"], draft["component"]):
        return False
    phase = (net_timing and draft["layer"] in NET_LAYERS) or (data_timing and draft["layer"] == "storage")
    # a GPU whose own device telemetry shows it (a link trained down, a throttle) slows the ring it
    # sits in: its loss is in the collectives' transfer time too (device_probe.gpu_or_network)
    ring = (net_timing and only_layers == NET_LAYERS and draft["layer"] == "compute"
            and has_device_row(draft["evidence"], draft["component"]))
    if only_layers and not ring and not (phase and draft["layer"] in only_layers):
        return False
    hosts = host_of or {}
    host = hosts.get(str(draft["component"]), draft["component"])
    if straggler_host is not None and host != straggler_host:
        return False
    on_host = [e for e in draft["evidence"] if hosts.get(e["source"], e["source"]) == host]
    if (not phase and not has_device_row(draft["evidence"])
            and not holds_its_share(on_host, draft["duration_s"] - base, cfg.straggler_min_share)):
        return False  # named from a straggler's timing alone, which holds little of what the step lost
    alone = (draft["confidence"] >= (cfg.corroborate_min_confidence if phase else need)
             and (not own_timing or phase or any(e.get("kind") == "timing" for e in on_host))
             and (not own_device or phase
                  or has_device_row(on_host)
                  # a straggler besides the write that alone holds what made the step faint: the
                  # writes' spread, what own_device guards against, is not in it (decompose.find_straggler)
                  or any(e.get("kind") == "timing" and e.get("metric") != CHECKPOINT_METRIC
                         and float(e["value"]) - float(e.get("baseline") or 0.0) >= FAINT_REL * base
                         for e in on_host)))
    if (alone and not phase and net_lost is not None and draft["layer"] in NET_LAYERS
            and net_lost < cfg.net_min_share * max(draft["duration_s"] - base, 0.0)):
        alone = False  # its collectives did not lose the time: a signal beside the step, unless both sides name it
    if (require_between or not alone) and not (between is not None
                                               and between((draft["layer"], draft["component"]))):
        return False  # (a sure cause does not ask its neighbours: two more attributions)
    draft["evidence"].append(step_row(draft["component"] or "", draft["duration_s"], base, sigma, "corroborated"))
    out.update(draft)
    return True
