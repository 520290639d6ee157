"""Step-time regression detector: false alarms on long fault-free runs, and detection delay.

Runs the production detector (service/alerts/detect.py, default settings unless overridden) over
synthetic job step-time series (service/alerts/synthetic.py: max over 16 ranks of log-normal
jitter, AR(1) drift, stalls, congestion bursts, checkpoint steps) for three noise profiles:

  typical   rank jitter 1%, drift 0.4%                      (what well-behaved large jobs look like)
  bursty    rank jitter 2%, drift 0.6%, 1% stalls, bursts every ~500 steps, checkpoint every 200
  wandering rank jitter 3%, drift 1% (AR 0.98)             (a hard case: slow 2-3% wander)

Prints per profile: false alarms over N fault-free steps, and the delay (steps of the regression
seen when the alert fires; 1 = on the first slow step) for a sustained 5% regression injected at a
random step, as a distribution. A 5% regression should fire within 50 steps.

    .venv/bin/python bench/alerts_detection.py [--steps 50000] [--runs 3] [--trials 100]
        [--min-steps N] [--min-regression R] [--threshold H] [--factor 1.05]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.alerts.detect import DetectorConfig, scan  # noqa: E402
from fabricscope.service.alerts.synthetic import step_times, with_regression  # noqa: E402

PROFILES: dict[str, dict[str, Any]] = {
    "typical": {},
    "bursty": {"rank_cv": 0.02, "drift_sd": 0.006, "stall_p": 0.01, "burst_p": 0.002, "ckpt_every": 200},
    "wandering": {"rank_cv": 0.03, "drift_sd": 0.01},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50_000, help="steps per fault-free run")
    ap.add_argument("--runs", type=int, default=3, help="fault-free runs per profile")
    ap.add_argument("--trials", type=int, default=100, help="regression injections per profile")
    ap.add_argument("--factor", type=float, default=1.05)
    ap.add_argument("--min-steps", type=int)
    ap.add_argument("--min-regression", type=float)
    ap.add_argument("--threshold", type=float)
    ap.add_argument("--profile", choices=sorted(PROFILES), action="append")
    a = ap.parse_args()
    over = {k: v for k, v in (("min_steps", a.min_steps), ("min_regression", a.min_regression),
                              ("threshold", a.threshold)) if v is not None}
    cfg = DetectorConfig(**over)
    print(f"detector: {cfg}")
    for name in a.profile or list(PROFILES):
        kw = PROFILES[name]
        t0 = time.perf_counter()
        fires = 0
        noise = []
        for run in range(a.runs):
            x = step_times(a.steps, seed=run, **kw)
            med = float(np.median(x))
            noise.append(1.4826 * float(np.median(np.abs(x - med))) / med)
            fires += sum(1 for t in scan(x, cfg) if t.kind == "fire")
        rate = (a.runs * a.steps) / (time.perf_counter() - t0)
        rng = np.random.default_rng(12345)
        delays, pre = [], 0
        for trial in range(a.trials):
            at = int(rng.integers(300, 1500))
            y = with_regression(step_times(at + 400, seed=10_000 + trial, **kw), at=at, factor=a.factor)
            tr = scan(y, cfg)
            pre += any(t.kind == "fire" and t.step < at for t in tr)
            hit = [t.step - at + 1 for t in tr if t.kind == "fire" and t.step >= at]
            delays.append(hit[0] if hit else 10**6)
        d = np.array(delays)
        missed = int((d > 400).sum())
        dd = d[d <= 400]
        print(f"\n[{name}] relative noise (MAD) {np.mean(noise) * 100:.2f}%  detector {rate / 1000:.0f}k steps/s")
        print(f"  false alarms: {fires} in {a.runs * a.steps} fault-free steps")
        if len(dd):
            print(f"  {a.factor - 1:.0%} regression, {a.trials} trials: delay p50 {np.median(dd):.0f}  "
                  f"p90 {np.percentile(dd, 90):.0f}  p99 {np.percentile(dd, 99):.0f}  max {dd.max()}  "
                  f"within 50: {(d <= 50).mean():.0%}  missed(>400): {missed}  already firing before: {pre}")
            edges = [1, 11, 16, 21, 26, 31, 41, 51, 101, 401]
            hist, _ = np.histogram(dd, bins=edges)
            bins = zip(edges, edges[1:], hist, strict=False)
            print("  delay histogram: " + "  ".join(f"{lo}-{hi - 1}:{n}" for lo, hi, n in bins))


if __name__ == "__main__":
    main()
