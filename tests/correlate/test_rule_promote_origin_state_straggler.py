"""A borderline step with no slow step beside it (corroborate.hidden_slow, EngineConfig.origin_state_straggler):
slow when its ranks waited for one GPU (beside_straggler_loss of the work, its ring's loss counted)
and that GPU reports, in the step's own span, a state that alone slows it (a throttle flag, a PCIe
link trained down). 789 run 33 step 41: a throttle's second step, after a checkpoint step, 2.8 sigmas
over its baseline, whose telemetry alone (0.745) was under a faint step's bar. The baselines, the
step summaries and the rule are the engine's; the draft attribution and the straggler are made up."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fabricscope.service.correlate.baseline import Baselines, compute_baselines
from fabricscope.service.correlate.constants import DEFAULT_CONFIG, EngineConfig
from fabricscope.service.correlate.corroborate import Probes
from fabricscope.service.correlate.decompose import Straggler
from fabricscope.service.correlate.promote import hidden_slow
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import ids

GPU = "h3:gpu2"
HOST_OF = {GPU: "h3", "h3": "h3"}
STEP, N = 30, 40
THROTTLE = {"source": GPU, "metric": "gpu_throttle_active", "value": 1.0, "baseline": 0.0, "score": 10.0,
            "unit": "value", "labels": {"reason": "hw_slowdown"}}
TEMPERATURE = {"source": GPU, "metric": "gpu_temperature_celsius", "value": 68.0, "baseline": 45.0, "score": 2.3,
               "unit": "value"}
TIMING = {"source": GPU, "metric": "compute_seconds", "value": 1.62, "baseline": 1.56, "score": 20.0,
          "kind": "timing", "unit": "seconds"}


def _steps(rel: float = 0.033, ring_s: float = 0.0) -> tuple[pd.DataFrame, Baselines]:
    """A quiet job (1 % noise) whose step STEP runs +3.3 % (`rel`): over the noise, under every bar;
    its collectives `ring_s` seconds over their usual transfer."""
    rng = np.random.default_rng(4)
    dur = 2.0 * (1 + 0.01 * rng.standard_normal(N))
    dur[STEP] = float(np.median(dur[10:STEP])) * (1 + rel)
    transfer = np.full(N, 0.3)
    transfer[STEP] += ring_s
    summ = pd.DataFrame({"step": np.arange(N), "n": 16, "dur": dur, "start": 1.7e9 + 2.1 * np.arange(N),
                         "ckpt_max": 0.0, "ckpt_med": 0.0, "transfer": transfer, "data": 0.05})
    return summ, compute_baselines(dur, transfer, np.zeros(N, bool), np.zeros(N))


def _judge(loss_share: float, rows: list[dict[str, Any]], cfg: EngineConfig = DEFAULT_CONFIG,
           host_level: bool = False, rel: float = 0.033, ring_s: float = 0.0) -> tuple[str | None, Attribution]:
    summ, bl = _steps(rel, ring_s)
    assert bl.borderline[STEP] == (rel > 0.03) and not bl.slow[STEP] and not bl.slow[STEP - 3:STEP + 4].any()
    st = Straggler(phase="compute", host_level=host_level, rank=9, host="h3", gpu=None if host_level else GPU,
                   value_s=1.62, peer_s=1.56, excess_s=0.06, z=9.0, members=[9])

    def explain(into: Attribution, corroborating: bool = False, own_span: bool = False) -> None:
        assert corroborating
        into.update({"layer": "compute", "component": "h3" if host_level else GPU, "confidence": 0.745,
                     "evidence": [dict(r) for r in rows]})  # type: ignore[misc]

    out: Attribution = {"step": STEP, "slow": False, "duration_s": float(summ["dur"][STEP]), "baseline_s": 2.0,
                        "start": None, "layer": "none", "component": None, "confidence": 1.0, "lost_s": 0.0,
                        "evidence": [], "causes": []}
    probes = Probes(explain=explain, between=lambda c, sides: False,
                    straggler=lambda: (st, loss_share * float(bl.base[STEP])), cover=lambda gpu, span: 0.0)
    ok = hidden_slow(out, bl=bl, summ=summ, i=STEP, cfg=cfg, host_of=HOST_OF, probes=probes, borrow=True)
    return ok, out


def test_a_gpu_its_ranks_waited_for_whose_own_state_slows_it_makes_the_step_slow() -> None:
    ok, out = _judge(0.035, [TIMING, THROTTLE])
    assert ok == ids.PROMOTE_ORIGIN_STATE and out["slow"] and (out["layer"], out["component"]) == ("compute", GPU), out
    assert out["evidence"][-1]["kind"] == "corroborated"


@pytest.mark.parametrize(("loss", "rows", "cfg", "host_level"), [
    (0.035, [TIMING, TEMPERATURE], DEFAULT_CONFIG, False),  # a temperature alone slows nothing
    (0.02, [TIMING, THROTTLE], DEFAULT_CONFIG, False),  # the ranks waited under beside_straggler_loss
    (0.035, [TIMING, THROTTLE], DEFAULT_CONFIG, True),  # a whole host, not one GPU
    (0.035, [TIMING, THROTTLE], replace(DEFAULT_CONFIG, origin_state_straggler=False), False),  # the rule off
])
def test_without_the_gpus_own_state_or_its_wait_the_step_stays_healthy(
        loss: float, rows: list[dict[str, Any]], cfg: EngineConfig, host_level: bool) -> None:
    ok, out = _judge(loss, rows, cfg, host_level)
    assert ok is None and out["layer"] == "none", out


def test_under_the_borderline_bar_the_wait_and_the_ring_must_cost_a_slow_steps_share() -> None:
    """Rule: under the borderline bar the GPU's wait and ring loss must reach a slow step's share
    (corroborate.hidden_slow, corroborate_straggler_loss)."""
    # 787 run 7 step 42's shape: a PCIe downtrain's last step at +2.4 %, no slow step after it; its
    # ranks waited 2.2 % for the GPU and its collectives lost 3.4 % more: together over REL (4 %)
    ok, out = _judge(0.022, [TIMING, THROTTLE], rel=0.024, ring_s=0.068)
    assert ok == ids.PROMOTE_ORIGIN_STATE and (out["layer"], out["component"]) == ("compute", GPU), out
    # the wait alone (2.2 %) is a borderline step's share, not a slow step's
    ok, out = _judge(0.022, [TIMING, THROTTLE], rel=0.024)
    assert ok is None and out["layer"] == "none", out
    # and without the GPU's own state, the wait and the ring name nothing
    ok, out = _judge(0.022, [TIMING, TEMPERATURE], rel=0.024, ring_s=0.068)
    assert ok is None and out["layer"] == "none", out
