"""Whether a step only the sequential test flagged (Baselines.unproven) lost its time where its
answer's cause would have cost it (engine._attribute): a network cause slows the collectives' transfer,
a shared volume every loader reads the ranks' `data` phase, a GPU's or a host's fault its own ranks'
local work. When it did not, the step is not slow and its `untimed` row says why."""

from __future__ import annotations

import math
from typing import Any

from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.causes import NET_LAYERS, has_origin_state
from fabricscope.service.correlate.constants import EngineConfig
from fabricscope.service.correlate.decompose import RankRows, work_on
from fabricscope.service.correlate.localize import Topo
from fabricscope.service.correlate.records import Attribution, EvidenceRow

UNTIMED_KIND = "untimed"
WORK_LAYERS = ("compute", "host")  # causes that slow their own ranks' local work (_untimed_work)


def _phase_row(metric: str, x: float, base_x: float, sigma_x: float) -> EvidenceRow:
    """The evidence row of a step's phase time (its collectives' pure transfer, its ranks' median
    `data` phase) against its baseline, which says why the cause its episode names was not the
    step's own (`kind`: untimed)."""
    ok = math.isfinite(x) and math.isfinite(base_x)
    return {
        "source": "",
        "metric": metric,
        "value": round(x, 6) if ok else 0.0,
        "baseline": round(base_x, 6) if ok else 0.0,
        "score": round((x - base_x) / max(sigma_x, 1e-9), 3) if ok and math.isfinite(sigma_x) else 0.0,
        "unit": "seconds",
        "kind": UNTIMED_KIND,
    }


# (work: a rank's local work, what a GPU's or a host's fault slows).
PHASE_METRIC = {"transfer": "collective_transfer_seconds", "data": "data_seconds", "work": "local_work_seconds"}


def _untimed_phase(out: Attribution, bl: Baselines, i: int, topo: Topo) -> tuple[str, float, float] | None:
    """For a slow step only the sequential test flagged (Baselines.unproven), the phase its answer
    slows by its nature when that phase did not lose the time (column, baseline, sigma); None when the
    answer stands. A network cause slows the collectives' transfer (net_timing); a shared volume every
    loader reads slows the ranks' `data` phase (data_timing)."""
    if not out["slow"] or not bl.unproven[i]:
        return None
    if out["layer"] in NET_LAYERS and not bl.net_timing[i]:
        return "transfer", float(bl.base_transfer[i]), float(bl.sigma_transfer[i])
    if (
        out["layer"] == "storage"
        and out["component"] in topo.shared_volumes
        and not bl.data_timing[i]
        and bl.data_base is not None
        and bl.data_sigma is not None
    ):
        return "data", float(bl.data_base[i]), float(bl.data_sigma[i])
    return None


def untimed_row(
    ranked: RankRows, out: Attribution, bl: Baselines, i: int, *, row: Any, topo: Topo, cfg: EngineConfig
) -> EvidenceRow | None:
    """The `untimed` row of step `i` when its answer's cause did not slow the phase it slows by its
    nature (_untimed_phase, _untimed_work); None when the answer stands."""
    phase = _untimed_phase(out, bl, i, topo)
    if phase is not None:
        return _phase_row(PHASE_METRIC[phase[0]], float(row[phase[0]]), phase[1], phase[2])
    return _untimed_work(ranked, out, bl, i, row=row, topo=topo, cfg=cfg)


def ring_loss(out: Attribution, bl: Baselines, i: int, row: Any, gpu_source: str) -> float:
    """What the step's collectives lost over their baseline transfer (seconds) when the answer's GPU
    is in a state that slows its hop of the ring (causes.has_origin_state: its PCIe link trained down
    carries the GPU's share of every all-reduce at a fraction of its speed); 0 otherwise."""
    return bl.transfer_lost(i, row["transfer"]) if has_origin_state(out["evidence"], gpu_source) else 0.0


def _untimed_work(
    ranked: RankRows, out: Attribution, bl: Baselines, i: int, *, row: Any, topo: Topo, cfg: EngineConfig
) -> EvidenceRow | None:
    """_untimed_phase for a GPU (`compute`) or a host cause: such a fault slows the local work of
    its own ranks, so a step only the sequential test flagged whose ranks there did no more work
    than the others, by straggler_min_share of the step's excess, was not slowed by it (a noisy step
    right after a GPU's throttle does not borrow that GPU from its episode).
    Not when the step's collectives lost time: a GPU's PCIe link trained down slows its ring; nor
    when, for such a GPU, its work and the collectives' unproven loss together hold that share (a
    downtrain's step whose GPU's work holds a third of the excess and its collectives' transfer as
    much again). The `untimed` row: the most local work of the cause's ranks against all ranks' median."""
    if (
        not out["slow"]
        or not bl.unproven[i]
        or out["layer"] not in WORK_LAYERS
        or bl.net_timing[i]
        or not out["component"]
    ):
        return None
    comp = str(out["component"])
    host = topo.host_of.get(comp, comp)
    gpu = comp[len(host) + 1 :] if out["layer"] == "compute" and comp.startswith(f"{host}:") else None
    if out["layer"] == "compute" and not gpu:
        return None
    steps_df, per_rank = ranked()
    work = work_on(per_rank, host, gpu) if len(steps_df) else None
    if work is None:
        return None
    x, med, sigma = work
    excess = float(out["duration_s"]) - float(bl.base[i])
    lost = x - med + (ring_loss(out, bl, i, row, comp) if gpu else 0.0)
    return None if lost >= cfg.straggler_min_share * excess else _phase_row(PHASE_METRIC["work"], x, med, sigma)
