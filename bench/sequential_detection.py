"""Small sustained regressions: slow-step recall, false slow steps, onset delay, end overshoot.

Draws synthetic job step-time series (numpy only, no database) and runs the step-time detector
(service/correlate/baseline.py: per-step threshold + sequential CUSUM segments) and, for
comparison, the detector before it (per-step threshold only, level adopted after 12 agreeing slow
steps; copied below as `old_detector`) on the same series.

Series (400 steps, base step time 1-3 s, a checkpoint step every 50):
  noise      jitter of 0.5-2.5% with the simulator's skew and hiccups, or --noise harsh
             (Student-t tails, hiccups of +0.5-4% of the step): see `healthy_noise`     (healthy)
  fault      +5/8/12% for 10-40 steps from a step in the middle, each step wobbling 0.85-1.15x
  large      a 1-3 step fault of +20-40% (must be slow at once)
  level      a permanent, flat +5-20% from a step in the middle (a new training phase)
Run kinds cycle: fault-free, one small fault, small fault + large faults, level change.

Constants (`SeqParams`: h, cap, shift_sigmas; h_end and min_mean fixed) are picked on the tuning seeds (highest worst
recall per fault size subject to a false slow-step rate <= 0.1% on fault-free runs, then fewest
false steps, then the larger h) and then REPORTED on held-back seeds never looked at. Both tables are printed, with
the defaults committed in constants.py and the old detector on the same seeds.

"final" = every step of the series given (what a GET of an old step or the steps listing sees,
look-ahead 16 steps suffices, see `settle`); "live" = what each step got when it was the newest
(background attribution before re-attribution).

    .venv/bin/python bench/sequential_detection.py [--runs 100] [--clean 40] [--quick] [--noise sim|harsh]
        [--seeds-tune 0] [--seeds-report 10000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricscope.service.correlate import constants as C  # noqa: E402
from fabricscope.service.correlate.baseline import Baselines, compute_baselines  # noqa: E402

N_STEPS = 400
CKPT_EVERY = 50
SIZES = (0.05, 0.08, 0.12)
SKIP = 25  # bootstrap steps not scored (the sequential test starts after min_history)


@dataclass
class Series:
    d: np.ndarray
    ckpt: np.ndarray
    ckpt_med: np.ndarray
    truth: np.ndarray  # bool: slow in truth
    kind: str
    small: list[tuple[int, int, float]] = field(default_factory=list)  # (start, length, size)
    change: int | None = None


def healthy_noise(rng: np.random.Generator, n: int, level: float, kind: str) -> np.ndarray:
    """Relative step-time noise of a healthy job.

    "sim" (as service/simulate/model.py's Noise): jitter of the given size that is Gumbel, the law of
    a maximum over many ranks (a synchronous step ends with its slowest rank: skewed right,
    exponential tail), a lognormal data phase (5% of the step, sigma 0.08), and the simulator's
    hiccups: each of 16 ranks x 5 compute segments has a 0.2% chance of +0.5-4% on its segment
    (a segment is ~16% of the step).
    "harsh" (a stress case): Student-t jitter (5 dof, a polynomial tail) and 1.5% of steps with a
    hiccup of +0.5-4% of the whole step.
    Both add a slow AR(1) wander (thermal, data mix; coefficient 0.95, stationary sd ~0.3%)."""
    wander = np.zeros(n)
    for i in range(1, n):
        wander[i] = 0.95 * wander[i - 1] + rng.normal(0.0, 0.001)
    if kind == "harsh":
        eps = rng.standard_t(5, n) / np.sqrt(5 / 3)
        return level * eps + wander + (rng.random(n) < 0.015) * rng.uniform(0.005, 0.04, n)
    eps = (rng.gumbel(0.0, 1.0, n) - np.euler_gamma) / (np.pi / np.sqrt(6))
    data = 0.05 * (rng.lognormal(0.0, 0.08, n) - 1.0)
    hic = (rng.random((n, 80)) < 0.002) * rng.uniform(0.005, 0.04, (n, 80)) * 0.16
    return level * eps + data + hic.max(axis=1) + wander


def draw(seed: int, noise_kind: str = "sim", clean: bool = False) -> Series:
    rng = np.random.default_rng(seed)
    n, b0 = N_STEPS, float(rng.uniform(1.0, 3.0))
    noise = healthy_noise(rng, n, float(rng.uniform(0.005, 0.025)), noise_kind)
    level = np.ones(n)
    extra = np.zeros(n)
    truth = np.zeros(n, bool)
    ckpt = (np.arange(n) % CKPT_EVERY == CKPT_EVERY - 1)
    ck_cost = 0.3 * b0
    kind = "clean" if clean else ("clean", "small", "mixed", "level")[seed % 4]
    s = Series(np.zeros(n), ckpt, np.where(ckpt, ck_cost, 0.0), truth, kind)
    if kind in ("small", "mixed"):
        start, length = int(rng.integers(120, n - 80)), int(rng.integers(10, 41))
        size = float(SIZES[(seed // 4) % 3])
        extra[start:start + length] += size * rng.uniform(0.85, 1.15, length)
        truth[start:start + length] = True
        s.small.append((start, length, size))
    if kind == "mixed":
        for _ in range(3):
            st = int(rng.integers(SKIP + 5, n - 5))
            if truth[max(st - 5, 0):st + 8].any():
                continue
            ln = int(rng.integers(1, 4))
            extra[st:st + ln] += rng.uniform(0.2, 0.4)
            truth[st:st + ln] = True
    if kind == "level":
        s.change = int(rng.integers(120, 250))
        level[s.change:] = 1.0 + rng.uniform(0.05, 0.2)
    d = b0 * level * (1.0 + noise + extra)
    s.d = d + ckpt * ck_cost * rng.normal(1.0, 0.03, n)
    return s


def old_detector(duration: np.ndarray, is_ckpt: np.ndarray, ckpt_med: np.ndarray) -> np.ndarray:
    """service/correlate/baseline.py before the sequential test (commit 677d072), slow flags only."""
    n = len(duration)
    slow = np.zeros(n, bool)
    hist: deque[float] = deque(maxlen=C.WINDOW)
    hist_ck: deque[float] = deque(maxlen=C.CKPT_HISTORY)
    run: list[float] = []
    for i in range(n):
        d = float(duration[i])
        if len(hist) < C.MIN_HISTORY:
            if not is_ckpt[i] and (not hist or d < C.BOOTSTRAP_MAX_RATIO * float(np.median(hist))):
                hist.append(d)
            continue
        hd = np.array(hist)
        med = float(np.median(hd))
        sigma = max(C.MAD_TO_SIGMA * float(np.median(np.abs(hd - med))), C.MIN_SIGMA_REL * med)
        if is_ckpt[i]:
            extra = float(np.median(hist_ck)) if hist_ck else float(ckpt_med[i]) + C.MIN_EXCESS_S
            b = med + extra
            slow[i] = d > b + max(C.K_SIGMA * sigma + C.CKPT_SPREAD_SHARE * extra, C.REL * b)
            if not slow[i]:
                hist_ck.append(d - med)
            continue
        slow[i] = d > med + max(C.K_SIGMA * sigma, C.REL * med)
        if not slow[i]:
            hist.append(d)
            run = []
        else:
            run.append(d)
            if len(run) >= 12:
                rd = np.array(run)
                if rd.max() - rd.min() <= 0.03 * float(np.median(rd)):
                    hist.clear()
                    hist.extend(run)
                run = run[1:]
    return slow


def new_detector(s: Series, seq: C.SeqParams) -> Baselines:
    return compute_baselines(s.d, np.zeros(len(s.d)), s.ckpt, s.ckpt_med, seq)


@dataclass
class Score:
    faulty: dict[float, list[int]] = field(default_factory=lambda: {z: [0, 0, 0] for z in SIZES})  # n, final, live
    clean_steps: int = 0
    clean_false: int = 0
    clean_false_live: int = 0
    near_false: int = 0  # healthy steps within 10 of a small fault flagged (final)
    onset: list[int] = field(default_factory=list)  # steps from fault start to first live flag
    overshoot_live: list[int] = field(default_factory=list)  # healthy steps after the end flagged live
    overshoot_final: list[int] = field(default_factory=list)
    large_n: int = 0
    large_hit: int = 0  # large-fault steps slow live (at once)
    level_after: int = 0  # steps flagged after the level settled (change + CHANGE_RUN + 2 on)
    level_n: int = 0


def score(series: list[Series], flags: list[tuple[np.ndarray, np.ndarray]], change_run: int) -> Score:
    sc = Score()
    for s, (fin, liv) in zip(series, flags, strict=True):
        n = len(s.d)
        if s.kind == "clean":
            sc.clean_steps += n - SKIP
            sc.clean_false += int(fin[SKIP:].sum())
            sc.clean_false_live += int(liv[SKIP:].sum())
        if s.kind == "level" and s.change is not None:
            lo = s.change + change_run + 2
            sc.level_after += int(fin[lo:].sum())
            sc.level_n += n - lo
        small = np.zeros(n, bool)
        for start, length, size in s.small:
            small[start:start + length] = True
            f = sc.faulty[size]
            f[0] += length
            f[1] += int(fin[start:start + length].sum())
            f[2] += int(liv[start:start + length].sum())
            hit = np.flatnonzero(liv[start:start + length])
            sc.onset.append(int(hit[0]) if len(hit) else length)
            end = start + length
            after = ~s.truth[end:end + 10]
            sc.overshoot_live.append(int((liv[end:end + 10] & after).sum()))
            sc.overshoot_final.append(int((fin[end:end + 10] & after).sum()))
            sc.near_false += int((fin[max(start - 10, 0):start] & ~s.truth[max(start - 10, 0):start]).sum())
        large = s.truth & ~small
        sc.large_n += int(large.sum())
        sc.large_hit += int(liv[large].sum())
    return sc


def evaluate(series: list[Series], seq: C.SeqParams) -> Score:
    flags = []
    for s in series:
        b = new_detector(s, seq)
        flags.append((b.slow, b.live))
    return score(series, flags, C.CHANGE_RUN)


def evaluate_old(series: list[Series]) -> Score:
    flags = []
    for s in series:
        f = old_detector(s.d, s.ckpt, s.ckpt_med)
        flags.append((f, f))
    return score(series, flags, 12)


def worst_recall(sc: Score) -> float:
    return min(f[1] / max(f[0], 1) for f in sc.faulty.values())


def pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:6.2f}%" if b else "   n/a"


def table(title: str, rows: list[tuple[str, Score, bool]]) -> None:
    print(f"\n== {title}")
    hdr = "detector".ljust(34) + "".join(f"rec+{int(z * 100):d}% " for z in SIZES)
    print(hdr + "false(clean) near-fault onset(med/p90) end-over(live/final) large-now level-settled")
    for name, sc, has_live in rows:
        rec = "".join(pct(f[1], f[0]) + " " for f in sc.faulty.values())
        on = np.array(sc.onset or [0])
        print(f"{name:34s}{rec}{pct(sc.clean_false, sc.clean_steps)}      {sc.near_false:4d}     "
              f"{np.median(on):4.1f}/{np.percentile(on, 90):4.1f}     "
              f"{np.mean(sc.overshoot_live):4.2f}/{np.mean(sc.overshoot_final):4.2f}          "
              f"{pct(sc.large_hit, sc.large_n)}  {pct(sc.level_n - sc.level_after, sc.level_n)}")
        if has_live:
            live = "".join(pct(f[2], f[0]) + " " for f in sc.faulty.values())
            print(f"{'   (live answers)':34s}{live}{pct(sc.clean_false_live, sc.clean_steps)}")


def settle(series: list[Series], seq: C.SeqParams, lookahead: int, every: int = 3) -> tuple[int, int]:
    """Steps (near the faults, every `every`-th) whose answer with `lookahead` later steps differs
    from the final one: the engine's look-ahead is enough when this is ~0."""
    differ = total = 0
    for s in series:
        if not s.small:
            continue
        fin = new_detector(s, seq).slow
        start, length, _ = s.small[0]
        for i in range(start - 5, min(start + length + 15, len(s.d)), every):
            cut = Series(s.d[:i + lookahead + 1], s.ckpt[:i + lookahead + 1], s.ckpt_med[:i + lookahead + 1],
                         s.truth, s.kind)
            differ += int(new_detector(cut, seq).slow[i] != fin[i])
            total += 1
    return differ, total


def simulator_check(runs: int) -> None:
    """The same detectors on service/simulate's timing model (16 ranks, pure numpy) and its ground
    truth (a step is slow when the fault adds >= 6%, healthy under 3%, the grey zone unscored), at
    three per-rank compute noise levels; a gpu_straggler of severity 0.06-0.13 for 10-40 steps in
    every other run, ckpt every 10 steps (its own class)."""
    from fabricscope.service.simulate.faults import make_fault
    from fabricscope.service.simulate.generator import generate
    from fabricscope.service.simulate.model import JobSpec
    from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

    spec = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
    cluster = build_cluster(spec)
    print("\n== simulator timing model (service/simulate), 300 steps per run; recall / false slow steps "
          "(healthy steps outside faults)")
    for cn in (0.004, 0.015, 0.03):
        c = {"slow": 0, "new": 0, "old": 0, "healthy": 0, "fp_new": 0, "fp_old": 0, "in_new": 0, "in_old": 0}
        for k in range(runs):
            rng = np.random.default_rng(50_000 + k)
            faults = [] if k % 2 == 0 else [make_fault(
                cluster, "gpu_straggler", start_step=int(rng.integers(100, 240)), steps=int(rng.integers(10, 41)),
                severity=float(rng.uniform(0.06, 0.13)), rng=rng)]
            sc = generate(spec, job="bench-seq", steps=300, faults=faults, seed=60_000 + k,
                          job_spec=JobSpec(compute_noise=cn))
            tl = sc.timeline
            d = np.median(tl.end - tl.start, axis=1)
            ck = np.nanmax(np.nan_to_num(tl.ckpt), axis=1) > 0
            ckm = np.where(ck, np.nanmedian(tl.ckpt, axis=1), 0.0)
            new = compute_baselines(d, np.zeros(len(d)), ck, ckm).slow
            old = old_detector(d, ck, ckm)
            for st in range(SKIP, len(d)):
                slow = sc.truth[st].slow
                if slow is True:
                    c["slow"] += 1
                    c["new"] += int(new[st])
                    c["old"] += int(old[st])
                elif slow is False and any(f.active(st) for f in faults):
                    c["in_new"] += int(new[st])  # the fault is on, but added under 3% to this step
                    c["in_old"] += int(old[st])
                elif slow is False:
                    c["healthy"] += 1
                    c["fp_new"] += int(new[st])
                    c["fp_old"] += int(old[st])
        jitter = f"per-rank compute noise {100 * cn:.1f}%"
        print(f"  {jitter:32s} new {pct(c['new'], c['slow'])} / {pct(c['fp_new'], c['healthy'])}   "
              f"old {pct(c['old'], c['slow'])} / {pct(c['fp_old'], c['healthy'])}   "
              f"({c['slow']} slow, {c['healthy']} healthy steps; steps of a fault that added < 3% "
              f"flagged: new {c['in_new']}, old {c['in_old']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100, help="series per set (tuning and held-back each)")
    ap.add_argument("--clean", type=int, default=40, help="extra fault-free series per set (false rate)")
    ap.add_argument("--quick", action="store_true", help="48 series per set, a smaller grid")
    ap.add_argument("--noise", choices=("sim", "harsh"), default="sim", help="see `healthy_noise`")
    ap.add_argument("--seeds-tune", type=int, default=0, metavar="BASE",
                    help="first seed of the tuning set (faulty BASE.., fault-free BASE+20000..); constants "
                         "were picked on 0")
    ap.add_argument("--seeds-report", type=int, default=10_000, metavar="BASE",
                    help="first seed of the held-back set, never looked at while picking (default 10000)")
    a = ap.parse_args()
    runs, clean = (48, 12) if a.quick else (a.runs, a.clean)
    t0 = time.perf_counter()
    tune = [draw(a.seeds_tune + seed, a.noise) for seed in range(runs)] + [
        draw(a.seeds_tune + 20_000 + k, a.noise, True) for k in range(clean)]
    # never looked at while picking
    held = [draw(a.seeds_report + seed, a.noise) for seed in range(runs)] + [
        draw(a.seeds_report + 20_000 + k, a.noise, True) for k in range(clean)]
    print(f"seeds: tuning {a.seeds_tune}..+{runs} (fault-free {a.seeds_tune + 20_000}..+{clean}), held back "
          f"{a.seeds_report}..+{runs} (fault-free {a.seeds_report + 20_000}..+{clean})")
    # h_end only moves the live end (5 vs 8: same final answers, shorter live overshoot) and
    # min_mean is REL by principle; h and cap trade onset delay against false alarms
    # shift_sigmas matters only in noisy jobs (sigma over shift / shift_sigmas = 2.5% of the step)
    grid = {"h": (14.0, 16.0, 18.0), "cap": (4.0,), "shift_sigmas": (1.5, 2.0, 3.0), "h_end": (5.0,),
            "min_mean": (0.04,)}
    if a.quick:
        grid = {"h": (12.0, 16.0), "cap": (3.0,), "shift_sigmas": (2.0,), "h_end": (5.0,), "min_mean": (0.04,)}
    print(f"{runs}+{clean} fault-free tuning and as many held-back series of {N_STEPS} steps, {a.noise} noise; "
          f"grid {grid}")
    best: tuple[tuple[float, ...], C.SeqParams] | None = None
    tuned: list[tuple[str, Score, bool]] = []
    for vals in itertools.product(*grid.values()):
        over: dict[str, Any] = dict(zip(grid, vals, strict=True))
        p = replace(C.DEFAULT_SEQ, **over)
        sc = evaluate(tune, p)
        # within the 0.1% target: best worst-case recall, then fewest false steps, then the larger
        # h (margin for noise the bench does not draw), then the shorter live overshoot
        ok = sc.clean_false <= 0.001 * sc.clean_steps
        key = (float(ok), round(worst_recall(sc), 3), -sc.clean_false, -sc.near_false, p.h,
               -float(np.mean(sc.overshoot_live)))
        tuned.append((f"h={p.h:g} cap={p.cap:g} ss={p.shift_sigmas:g} end={p.h_end:g}", sc, False))
        if best is None or key > best[0]:
            best = (key, p)
    assert best is not None
    picked = best[1]
    table("tuning seeds (constants picked here)", [*tuned, ("old detector", evaluate_old(tune), False)])
    print(f"\npicked: h={picked.h:g} cap={picked.cap:g} shift_sigmas={picked.shift_sigmas:g} h_end={picked.h_end:g} "
          f"min_mean={picked.min_mean:g}   committed defaults: h={C.DEFAULT_SEQ.h:g} cap={C.DEFAULT_SEQ.cap:g} "
          f"shift_sigmas={C.DEFAULT_SEQ.shift_sigmas:g} h_end={C.DEFAULT_SEQ.h_end:g} "
          f"min_mean={C.DEFAULT_SEQ.min_mean:g}")
    rows = [("new, picked constants", evaluate(held, picked), True)]
    if picked != C.DEFAULT_SEQ:
        rows.append(("new, committed defaults", evaluate(held, C.DEFAULT_SEQ), True))
    rows.append(("per-step test only (sequential off)", evaluate(held, replace(picked, enabled=False)), False))
    rows.append(("old detector", evaluate_old(held), False))
    table("HELD-BACK seeds (reported)", rows)
    simulator_check(8 if a.quick else 24)
    diff, tot = settle(held[: max(runs // 5, 8)], C.DEFAULT_SEQ, C.SEQ_LOOKAHEAD_STEPS)
    print(f"\nlook-ahead {C.SEQ_LOOKAHEAD_STEPS} steps: {diff}/{tot} sampled steps near faults differ from the "
          f"final answer")
    print("columns: rec+Z% = faulty steps of +Z% faults flagged; false(clean) = false slow steps on fault-free "
          "runs; near-fault = healthy steps in the 10 before a fault flagged; onset = steps of the fault seen "
          "before the first live flag; end-over = healthy steps in the 10 after a fault flagged (mean per "
          "fault); large-now = large-fault steps flagged when newest; level-settled = steps after the new "
          "level settled judged healthy")
    print(f"({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
