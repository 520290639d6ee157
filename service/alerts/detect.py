"""Sustained step-time regression detection: robust baseline + one-sided CUSUM (pure, no I/O).

Input is a job's step time (per step, the max over ranks of the step duration), fed in step order.

* Baseline: median of a window of recent *healthy* steps; noise = 1.4826·MAD, both relative to the
  median (a floor keeps a near-constant series from making every wobble significant). Steps of an
  open excursion are held back and only join the baseline once the excursion dies out, so a
  regression never raises its own bar; an excursion too small to alert on is absorbed after
  `max_pending` steps (slow drift becomes the new normal).
* Change detection: CUSUM on the relative residual r = x/median - 1 with reference value
  k = min_regression/2 (optimal for a shift of min_regression) and decision interval h =
  threshold·noise. Residuals are clipped so one pathological step (a GC pause, a checkpoint)
  cannot cross h alone.
* Confirmation (so one slow step never pages anyone): the excursion must have lasted `min_steps`
  steps and about 3/4 of its last `min_steps` steps must be at least min_regression above the baseline.
* Recovery: while firing the baseline is frozen; the alert resolves when the median of the last
  `recovery_steps` steps is back within min_regression/2 of it (hysteresis against flapping).

The detector's whole state is JSON-serialisable (`to_state`/`from_state`) so the engine can keep
it in the database between runs and across restarts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

CONFIRM_Q = 0.25


@dataclass(frozen=True)
class DetectorConfig:
    min_regression: float = 0.03  # smallest sustained slowdown (relative) worth alerting on
    threshold: float = 10.0  # CUSUM decision interval, in units of the baseline's relative noise
    min_steps: int = 20  # a regression must last this many steps before it fires
    recovery_steps: int = 20  # steps back near baseline before the alert resolves
    window: int = 100  # healthy steps in the baseline
    min_history: int = 20  # healthy steps needed before judging anything
    warmup: int = 3  # first steps of a job ignored (compilation, cache warm-up)
    clip: float = 4.0  # residuals clipped at max(clip·noise, 3·min_regression)
    noise_floor: float = 0.003  # relative noise never assumed below this
    max_pending: int = 200  # excursion steps held back from the baseline at most

    def __post_init__(self) -> None:
        if not 0 < self.min_regression < 10:
            raise ValueError("min_regression must be in (0, 10)")
        if self.threshold <= 0 or self.min_steps < 1 or self.recovery_steps < 1:
            raise ValueError("threshold, min_steps and recovery_steps must be positive")
        if self.window < 5 or not 5 <= self.min_history <= self.window:
            raise ValueError("need 5 <= min_history <= window")


@dataclass(frozen=True)
class Transition:
    kind: Literal["fire", "resolve"]
    step: int  # the step at which it was decided
    ts: float  # that step's start (epoch seconds)
    since_step: int  # first step of the regression
    since_ts: float
    baseline_s: float
    current_s: float  # median of the recent steps
    lost_s: float  # time lost vs baseline since the regression began
    steps: int  # steps in the regression so far


@dataclass
class Detector:
    config: DetectorConfig = field(default_factory=DetectorConfig)
    seen: int = 0
    healthy: deque[float] = field(default_factory=deque)
    cusum: float = 0.0
    pending: deque[tuple[int, float, float]] = field(default_factory=deque)  # (step, x, ts)
    firing: bool = False
    base: float = math.nan  # frozen baseline while firing
    since_step: int = -1
    since_ts: float = 0.0
    lost_s: float = 0.0
    n_regressed: int = 0
    recent: deque[float] = field(default_factory=deque)  # steps since firing, for current/recovery

    def __post_init__(self) -> None:
        self.healthy = deque(self.healthy, maxlen=self.config.window)
        self.recent = deque(self.recent, maxlen=max(self.config.recovery_steps, 4 * self.config.min_steps))

    # -- baseline -------------------------------------------------------------------------------------
    def baseline(self) -> tuple[float, float] | None:
        """(median seconds, relative noise) of the healthy window, None while there is too little."""
        if len(self.healthy) < self.config.min_history:
            return None
        h = np.fromiter(self.healthy, float, len(self.healthy))
        med = float(np.median(h))
        if med <= 0:
            return None
        noise = 1.4826 * float(np.median(np.abs(h - med))) / med
        return med, max(noise, self.config.noise_floor)

    def current_s(self) -> float:
        src = self.recent if self.firing else [p[1] for p in self.pending]
        tail = list(src)[-4 * self.config.min_steps:]
        return float(np.median(tail)) if tail else math.nan

    # -- one step -------------------------------------------------------------------------------------
    def update(self, step: int, x: float, ts: float = 0.0) -> Transition | None:
        cfg = self.config
        if not math.isfinite(x) or x <= 0:
            return None  # nothing to judge (a malformed or zero-length step)
        self.seen += 1
        if self.seen <= cfg.warmup:
            return None
        if self.firing:
            return self._while_firing(step, x, ts)
        bl = self.baseline()
        if bl is None:
            self.healthy.append(x)
            return None
        med, noise = bl
        k = cfg.min_regression / 2
        h = cfg.threshold * noise
        r = min(x / med - 1.0, max(cfg.clip * noise, 3 * cfg.min_regression))
        s = max(0.0, self.cusum + r - k)
        if s == 0.0:
            # the excursion (if any) died out: its steps were noise and join the baseline
            self.healthy.extend(p[1] for p in self.pending)
            self.healthy.append(x)
            self.pending.clear()
            self.cusum = 0.0
            return None
        self.cusum = min(s, 3 * h)  # bounded, so a long small excursion drains quickly once it ends
        self.pending.append((step, x, ts))
        if len(self.pending) > cfg.max_pending:
            self.healthy.append(self.pending.popleft()[1])
        if len(self.pending) >= cfg.min_steps and self.cusum > h:
            recent = [p[1] for p in self.pending][-cfg.min_steps:]
            # a low quantile, not the median: ~3/4 of the last min_steps steps must be slow, so a
            # short burst next to a checkpoint step cannot pass for a lasting regression
            if float(np.quantile(recent, CONFIRM_Q)) >= med * (1 + cfg.min_regression):
                return self._fire(step, ts, med)
        return None

    def _fire(self, step: int, ts: float, med: float) -> Transition:
        self.firing = True
        self.base = med
        first = self.pending[0]
        self.since_step, self.since_ts = first[0], first[2]
        xs = [p[1] for p in self.pending]
        self.lost_s = float(sum(max(0.0, v - med) for v in xs))
        self.n_regressed = len(xs)
        self.recent.clear()
        self.recent.extend(xs)
        self.pending.clear()
        self.cusum = 0.0
        return self._transition("fire", step, ts)

    def _while_firing(self, step: int, x: float, ts: float) -> Transition | None:
        cfg = self.config
        self.lost_s += max(0.0, x - self.base)
        self.n_regressed += 1
        self.recent.append(x)
        tail = list(self.recent)[-cfg.recovery_steps:]
        if len(tail) < cfg.recovery_steps or float(np.median(tail)) > self.base * (1 + cfg.min_regression / 2):
            return None
        out = self._transition("resolve", step, ts, current=float(np.median(tail)))
        # back to normal: the recovered steps are the freshest healthy evidence
        self.healthy.extend(tail)
        self.firing = False
        self.recent.clear()
        self.base = math.nan
        return out

    def _transition(self, kind: Literal["fire", "resolve"], step: int, ts: float,
                    current: float | None = None) -> Transition:
        return Transition(kind=kind, step=step, ts=ts, since_step=self.since_step, since_ts=self.since_ts,
                          baseline_s=self.base, current_s=self.current_s() if current is None else current,
                          lost_s=self.lost_s, steps=self.n_regressed)

    # -- persistence ----------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        return {
            "v": 1, "config": asdict(self.config), "seen": self.seen, "healthy": list(self.healthy),
            "cusum": self.cusum, "pending": [list(p) for p in self.pending], "firing": self.firing,
            "base": None if math.isnan(self.base) else self.base, "since_step": self.since_step,
            "since_ts": self.since_ts, "lost_s": self.lost_s, "n_regressed": self.n_regressed,
            "recent": list(self.recent),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any] | None, config: DetectorConfig) -> Detector:
        """Restore a saved detector; the *given* config wins (settings may have changed)."""
        if not state or state.get("v") != 1:
            return cls(config)
        return cls(
            config=config, seen=int(state["seen"]), healthy=deque(state["healthy"]), cusum=float(state["cusum"]),
            pending=deque((int(s), float(x), float(t)) for s, x, t in state["pending"]),
            firing=bool(state["firing"]), base=math.nan if state["base"] is None else float(state["base"]),
            since_step=int(state["since_step"]), since_ts=float(state["since_ts"]),
            lost_s=float(state["lost_s"]), n_regressed=int(state["n_regressed"]), recent=deque(state["recent"]),
        )


def scan(durations: np.ndarray, config: DetectorConfig | None = None, *, first_step: int = 0) -> list[Transition]:
    """Run a fresh detector over a whole series (benchmarks, tests, offline analysis)."""
    det = Detector(config or DetectorConfig())
    out = []
    for i, x in enumerate(durations.tolist()):
        t = det.update(first_step + i, x, float(i))
        if t is not None:
            out.append(t)
    return out
