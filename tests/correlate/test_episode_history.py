"""A long fault keeps its own evidence (issue #15): a minute into a sustained episode, the own_history_s
before a step is the fault itself, so the culprit's counters no longer stood out from their own past
and the step lived on its episode's borrowed cause, or on a victim's newest symptom (held-back seed
757 run 6: a 33-step incast named another port of the switch from step 41 on). A step inside an
episode is compared with its sources' history before the episode began. Through the real ingest API
and database."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.case import _history_end
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
START, LENGTH = 20, 45


def test_a_long_faults_late_steps_are_named_by_their_own_counters(service_url: str,
                                                                 db_conn: psycopg.Connection) -> None:
    f = make_fault(build_cluster(SPEC), "queue_incast", start_step=START, steps=LENGTH, severity=0.12,
                   rng=np.random.default_rng(1))
    sc = generate(SPEC, job="episode-history", steps=START + LENGTH + 10, faults=[f], seed=1, t0=1.783e9)
    post(service_url, sc)
    late = START + 35  # ~70 s into the fault, which began 40 s into the job: most of the port's past is the fault
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=late, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("fabric", f.component), a
    own = [e for e in a["evidence"] if e["source"] == f.component and e["metric"] == "ecn_marked_packets_total"]
    # compared with the port's marks before the fault began, not with the fault's own minute
    assert own and all(e["baseline"] * 10 < e["value"] for e in own), a["evidence"]
    assert a["confidence"] >= DEFAULT_CONFIG.episode_weak_confidence * 2
    # with the history just before the step, the port's marks are its normal: the step names nothing
    # of its own and lives on the episode's borrowed cause
    old = AttributionEngine(replace(DEFAULT_CONFIG, episode_history_max_s=-1.0))
    b = old.attribute_step(db_conn, job=sc.job, step=late, store=False)
    assert b is not None and [e["kind"] for e in b["evidence"] if e["source"] == f.component] == ["episode"], b
    assert b["confidence"] < a["confidence"]
    # the fault's early steps, whose history is before the fault either way, are the same
    for s in (START + 2, START + 5):
        x = AttributionEngine().attribute_step(db_conn, job=sc.job, step=s, store=False)
        y = old.attribute_step(db_conn, job=sc.job, step=s, store=False)
        assert x is not None and y is not None and x["component"] == y["component"] == f.component
        assert abs(x["confidence"] - y["confidence"]) < 0.05


def test_the_own_history_ends_before_the_earliest_episode_that_reaches_into_it() -> None:
    starts = np.arange(160) * 2.0  # 2-s steps: 45 of them in the 90-s own history
    episode = np.full(160, -1)
    episode[40:60] = 40  # a 20-step fault
    episode[70:72] = 70  # and a short one later
    cfg = replace(DEFAULT_CONFIG, own_history_s=90.0)
    assert _history_end(starts, episode, 30, cfg) is None  # no episode before: up to the step
    assert _history_end(starts, episode, 40, cfg) is None  # the episode's first step: its past is healthy
    assert _history_end(starts, episode, 55, cfg) == 80.0  # inside: before the fault began
    assert _history_end(starts, episode, 65, cfg) == 80.0  # just after it: its history holds the fault
    assert _history_end(starts, episode, 71, cfg) == 80.0  # the earliest episode in reach
    assert _history_end(starts, episode, 110, cfg) == 140.0  # the first fault ended > 90 s before
    assert _history_end(starts, episode, 150, cfg) is None  # both out of reach
    assert _history_end(starts, episode, 55, replace(cfg, episode_history_max_s=20.0)) is None  # too old
