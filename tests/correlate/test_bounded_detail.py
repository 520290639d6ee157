"""The engine with bounded collective detail (FABRICSCOPE_COLLECTIVE_DETAIL=bounded, #45 item 3): every
rank sends per-step collective summaries, full records only for the steps it found slow and for a
rotating sampled rank. A step's pure transfer time must be measured alike in the healthy steps (one
sampled rank's records, its waits included) and the slowed ones (every rank's): from the summaries,
every rank's, every step. Real database, a simulated job written as its ranks would have sent it."""

from __future__ import annotations

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate import queries as q
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.send import DirectSink, send_scenario
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
START, LENGTH, STEPS, SEED = 40, 6, 56, 4501

# What every rank sends for every step: its summed collective time per op (bucket and group size
# do not matter to the engine), as the hook's BoundedDetail makes it from the same records.
SUMMARIZE = """
INSERT INTO collective_summaries (job, rank, step, op, bucket, group_size, count, total_s, max_s,
                                  start_ts, end_ts)
SELECT job, rank, step, op, 0, 0, count(*), sum(duration_s), max(duration_s), min(start_ts), max(end_ts)
FROM collectives WHERE job = %(job)s AND step IS NOT NULL GROUP BY job, rank, step, op
"""
# A healthy step's records come from one rank (rotating); the slowed steps' from every rank.
THIN = """
DELETE FROM collectives WHERE job = %(job)s AND step IS NOT NULL AND NOT step = ANY(%(full)s)
  AND rank <> step %% %(world)s
"""


def _bounded_job(conn: psycopg.Connection, slot: int, kind: str, severity: float, *, flagged: bool = True
                 ) -> tuple[Scenario, list[int]]:
    """The job with `kind` at `severity` over steps START.. as its bounded hooks sent it: the
    fault's steps in full when `flagged` (every rank found them slow), else sampled like the rest.
    `slot`: the test's own job and time (the database is shared, and so are the cluster's series)."""
    f = make_fault(build_cluster(SPEC), kind, start_step=START, steps=LENGTH, severity=severity,
                   rng=np.random.default_rng(SEED))
    sc = generate(SPEC, job=f"bounded-{slot}-{kind}", steps=STEPS, faults=[f], seed=SEED, t0=1.79e9 + 1e4 * slot,
                  job_spec=JobSpec(compute_noise=0.004))
    send_scenario(DirectSink(conn), sc)
    slowed = [s for s, t in sorted(sc.truth.items()) if t.slow]
    assert slowed, "the fault slowed no step"
    conn.execute(SUMMARIZE, {"job": sc.job})
    full = list(range(START, START + LENGTH)) if flagged else []
    conn.execute(THIN, {"job": sc.job, "full": full, "world": sc.cluster.ranks})
    return sc, slowed


def test_the_transfer_time_is_read_alike_in_sampled_and_full_steps(db_conn: psycopg.Connection) -> None:
    sc, slowed = _bounded_job(db_conn, 0, "nic_degradation", 0.3)
    summ = q.step_summaries(db_conn, job=sc.job, lo=0, hi=STEPS).set_index("step")
    healthy = [s for s in range(10, START) if sc.truth[s].slow is False]
    base = float(np.median(summ.loc[healthy, "transfer"].astype(float)))
    # the healthy steps' transfer is as steady as their collectives: one rank's waits would spread it
    spread = summ.loc[healthy, "transfer"].astype(float) / base
    assert float(spread.max() - spread.min()) < 0.1, spread.describe()
    assert all(float(summ.loc[s, "transfer"]) > base for s in slowed)
    assert not summ["pending"].any()
    # a step whose ranks' summaries are not all in has no transfer yet (and is read again)
    db_conn.execute("DELETE FROM collective_summaries WHERE job = %s AND step = 20 AND rank = 3", (sc.job,))
    late = q.step_summaries(db_conn, job=sc.job, lo=20, hi=20).iloc[0]
    assert late["pending"] and late["transfer"] is None


def _attributed_right(conn: psycopg.Connection, sc: Scenario, slowed: list[int]) -> None:
    engine = AttributionEngine()
    got = {s: engine.attribute_step(conn, job=sc.job, step=s) for s in range(10, STEPS)}
    fault = sc.faults[0]
    for s in slowed:
        a = got[s]
        assert a is not None and a["slow"], (s, a)
        assert (a["layer"], a["component"]) == (fault.layer, fault.component), (s, a["layer"], a["component"])
    false_slow = [s for s, a in got.items() if sc.truth[s].slow is False and a is not None and a["slow"]]
    assert false_slow == []


def test_a_slowed_network_step_is_named_and_healthy_steps_stay_healthy(db_conn: psycopg.Connection) -> None:
    _attributed_right(db_conn, *_bounded_job(db_conn, 1, "nic_degradation", 0.3))


def test_a_straggler_no_rank_flagged_is_named_from_the_summaries(db_conn: psycopg.Connection) -> None:
    """+8 %: under every rank's own slow flag (1.2x its recent median), so its steps carry one sampled
    rank's records like the healthy ones; the ranks' summed collective times show whom they waited for."""
    _attributed_right(db_conn, *_bounded_job(db_conn, 2, "gpu_straggler", 0.08, flagged=False))


def test_a_step_whose_summaries_are_late_is_read_again(db_conn: psycopg.Connection) -> None:
    """The newest step: its ranks' step records are in, one rank's summaries not yet (the hook sends
    them a settle time after the step). Its summary row is not kept as final: once they land, the
    engine reads its transfer."""
    sc, _ = _bounded_job(db_conn, 3, "nic_degradation", 0.3)
    last, ranks = STEPS - 1, sc.cluster.ranks
    held = db_conn.execute("DELETE FROM collective_summaries WHERE job = %s AND step = %s AND rank = 5 RETURNING *",
                           (sc.job, last)).fetchall()
    assert held
    engine = AttributionEngine()
    first = engine._step_summaries(db_conn, sc.job, last - 3, last, ranks).set_index("step")
    assert bool(first.loc[last, "pending"]) and np.isnan(first.loc[last, "transfer"])
    with db_conn.cursor() as cur:
        cur.executemany(f"INSERT INTO collective_summaries VALUES ({', '.join(['%s'] * len(held[0]))})", held)
    again = engine._step_summaries(db_conn, sc.job, last - 3, last, ranks).set_index("step")
    assert not again.loc[last, "pending"] and again.loc[last, "transfer"] > 0
