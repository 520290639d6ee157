"""Rule ablation (issue #44): what each engine rule adds, on simulated runs no rule was tuned on.

The runs are generated and loaded once (direct COPY into a fresh database, as bench/attribution.py
--direct), then every step is attributed with every rule on (the baseline) and once per rule with
that rule off (EngineConfig.disabled). Each row prints the rule, how many answers it decided in the
baseline (as verdict, cause or adjustment) and the change in slow-step recall, layer and component
accuracy (of faulty steps) and false slow-step rate (of healthy steps) when it is off. A rule whose
row is all zeros added nothing on these runs: a candidate for removal (the catalogue says so when
it is removed). Seeds default to ones no constant was ever chosen on (not bench/attribution.py's
tune or held-back seeds, nor any test's).

    .venv/bin/python bench/ablation.py                       # 8 runs on seeds 9001,9002 (~20 min on 2 cores)
    .venv/bin/python bench/ablation.py --runs 4 --rules promote.fault_edge,cause.episode
    .venv/bin/python bench/ablation.py --database-url postgresql://...   # a server of yours (a new database)
    .venv/bin/python bench/ablation.py --rules none --dump before.json   # every rule on only, answers kept
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.attribution import RUN_SPACING_S, accuracy_runs, score  # noqa: E402
from fabricscope.service.correlate import AttributionEngine  # noqa: E402
from fabricscope.service.correlate.constants import DEFAULT_CONFIG  # noqa: E402
from fabricscope.service.correlate.rules import BY_ID  # noqa: E402
from fabricscope.service.simulate.generator import Scenario  # noqa: E402
from fabricscope.service.simulate.send import DirectSink, send_scenario  # noqa: E402

ENGINE_DIR = Path(__file__).resolve().parent.parent / "service" / "correlate"


def switchable() -> list[str]:
    """Rule ids the engine can switch off: those it asks `cfg.off(ids.X)` about."""
    from fabricscope.service.correlate.rules import ids

    names = set(re.findall(r"\.off\(ids\.([A-Z_]+)\)|off\(rule\)", "".join(
        p.read_text() for p in ENGINE_DIR.rglob("*.py"))))
    names.discard("")
    found = [getattr(ids, n) for n in names if hasattr(ids, n)]
    # the promotion rules are applied as data (promote.PROMOTIONS), each asked off(rule)
    from fabricscope.service.correlate.promote import PROMOTIONS

    found += [rule for rule, _ in PROMOTIONS]
    return sorted(set(found), key=lambda r: BY_ID[r].precedence)


def load(conn: psycopg.Connection, seeds: list[int], n_runs: int, step_jitter: float | None = None,
         bounded: str | None = None) -> list[Scenario]:
    sink = DirectSink(conn)
    clock = itertools.count()
    runs: list[Scenario] = []
    prev = None
    per_seed = [n_runs // len(seeds) + (j < n_runs % len(seeds)) for j in range(len(seeds))]
    t_all = time.perf_counter()
    for seed, n in zip(seeds, per_seed, strict=True):
        for i in range(n):
            (sc,) = accuracy_runs(1, seed, first=i, t0=1.75e9 + next(clock) * RUN_SPACING_S, step_jitter=step_jitter)
            send_scenario(sink, sc, topology=sc.cluster.spec != prev)
            prev = sc.cluster.spec
            if bounded:  # the summaries and collectives a hook in bounded mode sends (bench/bounded_filter.py)
                from bench.bounded_filter import thin

                thin(conn, sc.job, bounded)
            runs.append(sc)
            print(f"  loaded run {len(runs)}/{n_runs} (seed {seed}#{i}, {len(sc.truth)} steps, "
                  f"{sum(1 for f in sc.faults)} faults) [{time.perf_counter() - t_all:.0f}s]", flush=True)
    return runs


def attribute(conn: psycopg.Connection, runs: list[Scenario], disabled: frozenset[str]) -> list[tuple[Scenario, Any]]:
    """Every step of `runs`, attributed afresh with the rules `disabled` off. Each run's own topology
    is put back first: a PUT replaces the declared topology, and the runs were loaded one after another."""
    engine = AttributionEngine(replace(DEFAULT_CONFIG, disabled=disabled)) if disabled else AttributionEngine()
    conn.execute("DELETE FROM attributions WHERE job = ANY(%s)", ([sc.job for sc in runs],))
    sink = DirectSink(conn)
    out = []
    for sc in runs:
        sink.put_topology(sc.topology_body())
        engine.clear_caches()
        out.append((sc, {s: engine.attribute_step(conn, job=sc.job, step=s) for s in sorted(sc.truth)}))
    return out


def rates(results: list[tuple[Scenario, Any]]) -> dict[str, float]:
    c = score(results)["c"]
    f, h = max(c["faulty"], 1), max(c["healthy"], 1)
    return {"recall": c["detected"] / f, "layer": c["layer_ok"] / f, "component": c["comp_ok"] / f,
            "false_slow": c["false_slow"] / h, "faulty": c["faulty"], "healthy": c["healthy"]}


def decided(results: list[tuple[Scenario, Any]]) -> Counter[str]:
    """How many answers each rule decided (verdict, cause or an adjustment)."""
    n: Counter[str] = Counter()
    for _, got in results:
        for a in got.values():
            r = (a or {}).get("rules") or {}
            n.update(x for x in [r.get("verdict"), r.get("cause"), *r.get("adjust", [])] if x)
    return n


def dump_answers(path: Path, results: list[tuple[Scenario, Any]]) -> None:
    """The answers that decide accuracy, one row per step, in a stable order (a diff of two dumps is
    the steps whose answer changed)."""
    keep = ("slow", "layer", "component", "confidence", "rules")
    rows = [{"job": sc.job, "step": s, **{k: (a or {}).get(k) for k in keep}}
            for sc, got in results for s, a in sorted(got.items())]
    path.write_text(json.dumps(rows, indent=0, sort_keys=True))
    print(f"dumped {len(rows)} answers to {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="9001,9002", help="seeds no rule was tuned on")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--rules", default=None, help="comma list of rule ids to ablate (default: every switchable one)")
    ap.add_argument("--database-url", default=None, help="a PostgreSQL server (default: an embedded one)")
    ap.add_argument("--step-jitter", type=float, default=None,
                    help="every run's healthy step-time spread (e.g. 0.15: a noisy host) instead of the drawn 1-2 %%")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write every baseline answer (verdict, layer, component, confidence, rules) as JSON, "
                         "to compare two engines' answers step by step")
    ap.add_argument("--bounded-detail", choices=("rank", "step"), default=None,
                    help="keep only the collectives a hook in bounded mode sends, with every rank's per-step "
                         "summaries (#45 item 3; bench/bounded_filter.py)")
    args = ap.parse_args()
    from tests.support import TestDatabase

    seeds = [int(s) for s in args.seeds.split(",")]
    rules = [] if args.rules == "none" else args.rules.split(",") if args.rules else switchable()
    unknown = [r for r in rules if r not in BY_ID]
    if unknown:
        sys.exit(f"bench/ablation.py: --rules: not rule ids: {', '.join(unknown)}")
    db = TestDatabase.create(args.database_url, Path(tempfile.mkdtemp(prefix="fs-ablation-")))
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            print(f"ablation: {args.runs} runs on seeds {seeds}; {len(rules)} rules, each switched off alone",
                  flush=True)
            runs = load(conn, seeds, args.runs, args.step_jitter, args.bounded_detail)
            t = time.perf_counter()
            base_results = attribute(conn, runs, frozenset())
            base, uses = rates(base_results), decided(base_results)
            print(f"baseline (every rule on, {time.perf_counter() - t:.0f}s): {int(base['faulty'])} faulty steps, "
                  f"{int(base['healthy'])} healthy; recall {base['recall']:.4f}, layer {base['layer']:.4f}, "
                  f"component {base['component']:.4f}, false slow {base['false_slow']:.4f}", flush=True)
            if args.dump:
                dump_answers(args.dump, base_results)
            print(f"{'rule off':34s} {'decided':>7} {'recall':>8} {'layer':>8} {'component':>9} {'false slow':>10}")
            for rule in rules:
                t = time.perf_counter()
                r = rates(attribute(conn, runs, frozenset({rule})))
                d = {k: r[k] - base[k] for k in ("recall", "layer", "component", "false_slow")}
                verdict = "  (changes nothing)" if not any(abs(v) > 1e-12 for v in d.values()) else ""
                print(f"{rule:34s} {uses.get(rule, 0):7d} {d['recall']:+8.4f} {d['layer']:+8.4f} "
                      f"{d['component']:+9.4f} {d['false_slow']:+10.4f}{verdict}  [{time.perf_counter() - t:.0f}s]",
                      flush=True)
            never = sorted(set(BY_ID) - set(switchable()))
            print(f"not switchable yet (always on): {', '.join(never)}")
            print("decided in the baseline: " + ", ".join(f"{k} {v}" for k, v in uses.most_common()))
    finally:
        db.drop()


if __name__ == "__main__":
    main()
