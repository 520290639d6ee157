"""Whether a step under the slow bar was slowed all the same (engine._attribute's not-slow branch):
its own telemetry names a cause surely enough (a borderline step), its ranks' own clocks show a
straggler, or it sits inside a fault that spans steps whose neighbours name the cause its telemetry
names. The engine injects what needs the database: `explain` (its telemetry), `between` (the
neighbours' answers), `straggler` (its rank rows) and `cover` (a GPU's state over the step)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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

STORAGE_ONLY = ("storage",)
CauseKey = tuple[str, str | None]  # an answer's (layer, component)
Sides = tuple[list[int], ...]  # the steps before and after a step that may be slow (around.slow_around)
Explain = Callable[[Attribution, bool, bool], None]  # (into, corroborating, own_span): engine._explain


def step_row(source: str, d: float, base: float, sigma: float, kind: str) -> EvidenceRow:
    """The evidence row of a step's own time against its baseline (its excess in sigmas), which says
    why the step time alone did not decide (`kind`: corroborated, onset)."""
    return {
        "source": source,
        "metric": "step_duration_seconds",
        "value": round(d, 6),
        "baseline": round(base, 6),
        "score": round((d - base) / max(sigma, 1e-9), 3),
        "unit": "seconds",
        "kind": kind,
    }


def holds_its_share(rows: list[Any], excess: float, share: float) -> bool:
    """Whether a timing row of `rows` holds `share` of the step's `excess` (seconds over its baseline):
    a straggler whose own excess is a small part of what the step lost did not make the step slow
    (the ranks' usual spread has a few-sigma rank on many healthy steps; causes.work_cause weighs a
    slow step's straggler by the same share)."""
    return excess <= 0.0 or any(
        e.get("kind") == "timing" and float(e["value"]) - float(e.get("baseline") or 0.0) >= share * excess
        for e in rows
    )


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


@dataclass(frozen=True)
class Demand:
    """What a promotion rule asks of a draft (the step's attribution as if it were slow, from its own
    window) before it makes a step under the bar slow; `need`: the draft's least confidence
    (corroborate_min_confidence, or corroborate_faint_confidence for a faint step). The other fields
    are described in `corroborated`."""

    need: float
    own_timing: bool = False
    own_device: bool = False
    between: Callable[[CauseKey], bool] | None = None
    net_timing: bool = False
    data_timing: bool = False
    only_layers: tuple[str, ...] = ()
    require_between: bool = False
    straggler_host: str | None = None
    own_state: bool = False
    own_span: bool = False
    origin_state: bool = False
    net_lost: float | None = None
    error_rate: bool = False


@dataclass(frozen=True)
class Judge:
    """What every demand of one step is judged with: the engine's `explain`, its configuration, the
    step's baseline and robust sigma (seconds) and which host each component is on (Topo.host_of)."""

    explain: Explain
    cfg: EngineConfig
    base: float
    sigma: float
    host_of: Mapping[str, str] = field(default_factory=dict)


def corroborated(out: Attribution, judge: Judge, demand: Demand) -> bool:
    """A borderline step (over the noise, under the bar) is slow when its own telemetry names a cause
    with confidence `need` (corroborate_min_confidence, or corroborate_faint_confidence for a faint
    one): `out` is then that attribution, with an evidence row `kind: corroborated` saying the timing
    alone did not decide.

    - `own_timing`: only a cause resting on the step's own rank timings (a straggler's `timing` row)
      counts, not sampled telemetry (baseline.py: near_slow); `own_device`: and a telemetry row of that
      host's own devices too, or a straggler outside the checkpoint write (baseline.py: ckpt_faint).
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
    cfg, base, sigma, d = judge.cfg, judge.base, judge.sigma, demand
    need, own_timing, own_device, between, net_timing = d.need, d.own_timing, d.own_device, d.between, d.net_timing
    only_layers, straggler_host, net_lost = d.only_layers, d.straggler_host, d.net_lost
    if not 0.0 < need <= 1.0 or not 0.0 < cfg.corroborate_min_confidence <= 1.0:
        return False
    draft: Attribution = {**out, "slow": True, "evidence": [], "causes": []}
    judge.explain(draft, True, d.own_span)
    if draft["layer"] == "unknown" or draft["confidence"] < cfg.corroborate_min_confidence:
        return False
    if d.own_state and not has_state_row(draft["evidence"], draft["component"]):
        return False
    if d.origin_state and not has_origin_state(draft["evidence"], draft["component"]):
        return False
    if d.error_rate and not has_error_rate(draft["evidence"], draft["component"]):
        return False
    phase = (net_timing and draft["layer"] in NET_LAYERS) or (d.data_timing and draft["layer"] == "storage")
    # a GPU whose own device telemetry shows it (a link trained down, a throttle) slows the ring it
    # sits in: its loss is in the collectives' transfer time too (device_probe.gpu_or_network)
    ring = (
        net_timing
        and only_layers == NET_LAYERS
        and draft["layer"] == "compute"
        and has_device_row(draft["evidence"], draft["component"])
    )
    if only_layers and not ring and not (phase and draft["layer"] in only_layers):
        return False
    hosts = judge.host_of
    host = hosts.get(str(draft["component"]), draft["component"])
    if straggler_host is not None and host != straggler_host:
        return False
    on_host = [e for e in draft["evidence"] if hosts.get(e["source"], e["source"]) == host]
    if (
        not phase
        and not has_device_row(draft["evidence"])
        and not holds_its_share(on_host, draft["duration_s"] - base, cfg.straggler_min_share)
    ):
        return False  # named from a straggler's timing alone, which holds little of what the step lost
    alone = (
        draft["confidence"] >= (cfg.corroborate_min_confidence if phase else need)
        and (not own_timing or phase or any(e.get("kind") == "timing" for e in on_host))
        and (
            not own_device
            or phase
            or has_device_row(on_host)
            # a straggler besides the write that alone holds what made the step faint: the
            # writes' spread, what own_device guards against, is not in it (decompose.find_straggler)
            or any(
                e.get("kind") == "timing"
                and e.get("metric") != CHECKPOINT_METRIC
                and float(e["value"]) - float(e.get("baseline") or 0.0) >= FAINT_REL * base
                for e in on_host
            )
        )
    )
    if (
        alone
        and not phase
        and net_lost is not None
        and draft["layer"] in NET_LAYERS
        and net_lost < cfg.net_min_share * max(draft["duration_s"] - base, 0.0)
    ):
        alone = False  # its collectives did not lose the time: a signal beside the step, unless both sides name it
    if (d.require_between or not alone) and not (between is not None and between((draft["layer"], draft["component"]))):
        return False  # (a sure cause does not ask its neighbours: two more attributions)
    draft["evidence"].append(step_row(draft["component"] or "", draft["duration_s"], base, sigma, "corroborated"))
    out.update(draft)
    return True
