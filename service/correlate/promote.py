"""The promotion rules: a step under the slow bar that was slowed all the same (rules/catalogue.py,
family `promote`). Each rule is one method of `_Step`, and PROMOTIONS applies them in precedence
order: the first that holds decides, and its id is the answer's verdict rule. Every rule builds a
`Demand` of the step's own telemetry (corroborate.corroborated) from what the step's timings show;
the engine injects what needs the database (`Probes`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from fabricscope.service.correlate.around import at_their_level, slow_around, slow_beside, slow_near
from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.constants import EngineConfig
from fabricscope.service.correlate.corroborate import (
    CauseKey,
    Demand,
    Judge,
    Probes,
    Sides,
    corroborated,
    only_layers,
)
from fabricscope.service.correlate.decompose import Straggler, is_checkpoint
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import ids


@dataclass
class _Step:
    """Step `i` of `summ` (under the bar) as the promotion rules read it; `out` becomes its
    attribution when one holds. `borrow`: it may ask its neighbours (not when it is one asked)."""

    out: Attribution
    bl: Baselines
    summ: pd.DataFrame
    i: int
    cfg: EngineConfig
    probes: Probes
    judge: Judge
    borrow: bool
    tried: list[Sides] = field(default_factory=list)  # the gaps the inside-fault rules asked about

    @property
    def row(self) -> pd.Series:
        return self.summ.iloc[self.i]

    @property
    def checkpoint(self) -> bool:
        return is_checkpoint(self.row)

    @property
    def over_centre(self) -> bool:
        return float(self.row["dur"]) > float(self.bl.centre[self.i])

    @property
    def borderline(self) -> bool:
        return bool(self.bl.borderline[self.i])

    def holds(self, into: Attribution, demand: Demand) -> bool:
        return corroborated(into, self.judge, demand)

    def named_by(self, sides: Sides | None = None) -> Callable[[CauseKey], bool]:
        return lambda c: self.probes.between(c, sides)

    def straggler(self, share: float, ring: bool = False) -> Straggler | None:
        """The straggler the step's ranks waited for by `share` of its work, None: none. What a fault
        can slow at a checkpoint step is the step less its write: the same loss is a smaller share of
        a checkpoint step's baseline. A bar of inf is the rule off: no rank rows read."""
        if not math.isfinite(share):
            return None
        got = self.probes.straggler()
        if got is None:
            return None
        row = self.row
        ckpt = float(row["ckpt_med"]) if self.checkpoint and pd.notna(row["ckpt_med"]) else 0.0
        work = float(self.bl.base[self.i]) - ckpt
        return got[0] if got[1] + (self.ring_loss(got[0]) if ring else 0.0) >= share * work else None

    def ring_loss(self, st: Straggler) -> float:
        # one GPU's fault may sit in its hop of the ring too (a PCIe link trained down), which the
        # ranks' wait for its work does not hold (EngineConfig.beside_ring_loss)
        return self.bl.transfer_lost(self.i, self.row["transfer"]) if st.gpu and not st.host_level else 0.0

    def gpu_judged(self, st: Straggler | None, *, origin_state: bool = False, error_rate: bool = False) -> bool:
        # one GPU the ranks waited for (not a host), whose own span's telemetry names it with its own
        # state (`origin_state`) or its error counters running (`error_rate`)
        return (
            st is not None
            and st.gpu is not None
            and not st.host_level
            and self.holds(
                self.out,
                Demand(
                    self.cfg.corroborate_min_confidence,
                    own_timing=True,
                    own_span=True,
                    origin_state=origin_state,
                    error_rate=error_rate,
                ),
            )
        )

    # -- the rules, in precedence order ---------------------------------------------------------

    def borderline_telemetry(self) -> bool:
        # a faint or near-slow step between two slow steps that name one cause: inside that fault (it
        # spans steps), so its telemetry need only name the same cause (the neighbours' answers are
        # computed without this rule: no chain of them)
        bl, i, cfg = self.bl, self.i, self.cfg
        faint, ck_faint, own = bool(bl.faint[i]), bool(bl.ckpt_faint[i]), bool(bl.near_slow[i])
        need = cfg.corroborate_faint_confidence if faint else cfg.corroborate_min_confidence
        return self.borderline and self.holds(
            self.out,
            Demand(
                need,
                own_timing=own or ck_faint,
                own_device=ck_faint,
                between=self.named_by() if self.borrow and (faint or own) else None,
                net_timing=bool(bl.net_timing[i]),
                data_timing=bool(bl.data_timing[i]),
                only_layers=only_layers(bl, i),
                net_lost=bl.transfer_lost(i, self.row["transfer"]),
            ),
        )

    def straggler_clocks(self) -> bool:
        # its timing alone decided nothing: the ranks' own clocks may still show what it hid
        return (
            self.over_centre
            and not self.checkpoint
            and self.straggler(self.cfg.corroborate_straggler_loss) is not None
            and self.holds(self.out, Demand(self.cfg.corroborate_min_confidence, own_timing=True))
        )

    def origin_state_straggler(self) -> bool:
        # a borderline step whose ranks waited for one GPU that reports, in the step's own span, a
        # state that alone slows it (a throttle flag, a PCIe link trained down): the device's own
        # signal names the cause and the ranks' clocks its cost, as a faint step's telemetry and a
        # slow neighbour would. A step under the borderline bar needs the cost of a slow step (REL)
        # on those clocks: a downtrain's last step whose wait and ring loss reach it is slow, the
        # fault's tail after it is not (no neighbour rule)
        cfg = self.cfg
        if not ((self.borderline or self.over_centre) and not self.checkpoint and cfg.origin_state_straggler):
            return False
        share = cfg.beside_straggler_loss if self.borderline else cfg.corroborate_straggler_loss
        return self.gpu_judged(self.straggler(share, ring=cfg.beside_ring_loss), origin_state=True)

    def error_rate_straggler(self) -> bool:
        # ...or whose ranks waited for one GPU, and whose ring lost time too, a slow step's cost
        # together (corroborate_straggler_loss), while that GPU's error counters ran in the step's
        # own span (PCIe replays): a link retrying slows both its GPU's work and its ring hop, which
        # a compute straggler's clocks do not. A PCIe link trained down for under a second of a step
        # is missed by a state read every 2-10 s; its replays are counted
        cfg = self.cfg
        if not (self.borderline and not self.checkpoint and cfg.error_rate_straggler):
            return False
        return self.gpu_judged(self.straggler(cfg.corroborate_straggler_loss, ring=True), error_rate=True)

    def beside_slow(self) -> bool:
        # beside a slow step, or between two: the step's noise can hide the fault's loss whole (a
        # step at its baseline, the fault's first or last step, a checkpoint step), but the ranks'
        # own clocks still show the straggler; it counts when it is the cause the slow steps beside
        # it name
        near = slow_near(self.bl, self.summ, self.i, 1) if self.borrow else None
        if near is None:
            return False
        st = self.straggler(self.cfg.beside_straggler_loss, ring=self.cfg.beside_ring_loss)
        return st is not None and self.holds(
            self.out,
            Demand(
                self.cfg.corroborate_min_confidence,
                between=self.named_by(near),
                require_between=True,
                straggler_host=st.host,
            ),
        )

    def inside(self, reach: int, far: bool) -> bool:
        """Inside a fault that spans steps, whose cause's own device still shows it in this step's
        window (a PCIe link trained down, a throttle): the fault slowed this step as it did the steps
        either side, whatever the step's noise did with the loss. The nearest slow steps either side,
        up to `reach` away, must name it (`far`: a GPU's own state that alone slows it, read in the
        step's own span, not the next step's first second where a fault may begin); a step far under
        their level is between two faults, not inside one. Not at a checkpoint step (the borderline
        rule's checkpoint demands hold there)."""
        cfg, bl, summ, i = self.cfg, self.bl, self.summ, self.i
        if not (self.borrow and not self.checkpoint and cfg.fill_gap_steps > 0):
            return False
        around = slow_around(bl, summ, i, reach)
        if around is None or around in self.tried or not at_their_level(bl, summ, i, around):
            return False
        self.tried.append(around)
        gap: Attribution = {**self.out}
        ok = self.holds(
            gap,
            Demand(
                cfg.corroborate_min_confidence,
                require_between=True,
                own_state=True,
                own_span=far,
                origin_state=far,
                between=self.named_by(around),
            ),
        ) and (
            far
            or not cfg.fill_gap_state_throughout
            or _state_throughout(self.probes, summ, i, around, str(gap["component"]))
        )
        if ok:
            self.out.update(gap)
        return ok

    def inside_fault(self) -> bool:
        return self.inside(self.cfg.fill_gap_steps, far=False)

    def inside_fault_origin(self) -> bool:
        return self.inside(self.cfg.fill_gap_origin_steps, far=True)

    def fault_edge(self) -> bool:
        # the first or last step of a GPU's fault whose own state says it is slowed (its PCIe link
        # trained down, a throttle flag) in the step's own span (not the next step's first second,
        # where the fault may have begun) and whose slow steps right after or before it name that
        # GPU. Not other causes' gauges nor a GPU's clock in the step: a volume's latency and a
        # straggler's time were high in the steps before their faults began often enough to make such
        # a rule flag healthy steps. The state must cover, between its first and last reading in it,
        # most of the step (fill_edge_share): a fault that began late in the step, or ended early in
        # it, slowed it little, and a 10-s reading dates neither.
        if not (self.borrow and not self.checkpoint):
            return False
        edge = slow_beside(self.bl, self.summ, self.i, self.cfg.fill_edge_steps)
        if edge is None or not at_their_level(self.bl, self.summ, self.i, edge, over_centre=True):
            return False
        start, d = float(self.row["start"]), float(self.row["dur"])
        trial: Attribution = {**self.out}
        ok = (
            self.holds(
                trial,
                Demand(
                    self.cfg.corroborate_min_confidence,
                    require_between=True,
                    origin_state=True,
                    own_span=True,
                    between=self.named_by(edge),
                ),
            )
            and self.probes.cover(str(trial["component"]), (start, start + d)) >= self.cfg.fill_edge_share * d
        )
        if ok:
            self.out.update(trial)
        return ok


# The promotion rules in precedence order (rules/catalogue.py): the first that holds decides.
PROMOTIONS: tuple[tuple[str, Callable[[_Step], bool]], ...] = (
    (ids.PROMOTE_BORDERLINE, _Step.borderline_telemetry),
    (ids.PROMOTE_STRAGGLER, _Step.straggler_clocks),
    (ids.PROMOTE_ORIGIN_STATE, _Step.origin_state_straggler),
    (ids.PROMOTE_ERROR_RATE, _Step.error_rate_straggler),
    (ids.PROMOTE_BESIDE_SLOW, _Step.beside_slow),
    (ids.PROMOTE_INSIDE_FAULT, _Step.inside_fault),
    (ids.PROMOTE_INSIDE_FAULT_ORIGIN, _Step.inside_fault_origin),
    (ids.PROMOTE_FAULT_EDGE, _Step.fault_edge),
)


def hidden_slow(
    out: Attribution,
    *,
    bl: Baselines,
    summ: pd.DataFrame,
    i: int,
    cfg: EngineConfig,
    host_of: dict[str, str],
    probes: Probes,
    borrow: bool,
) -> str | None:
    """The promotion rule (rules/ids.py) by which step `i` of `summ`, under the slow bar, was slowed
    all the same, None when none holds; `out` is then its attribution. `borrow`: the step may ask its
    neighbours (not when it is itself a neighbour asked)."""
    judge = Judge(probes.explain, cfg, float(bl.base[i]), float(bl.sigma[i]), host_of)
    step = _Step(out, bl, summ, i, cfg, probes, judge, borrow)
    for rule, holds in PROMOTIONS:
        if not cfg.off(rule) and holds(step):
            return rule
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
