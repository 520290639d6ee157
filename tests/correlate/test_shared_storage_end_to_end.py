"""Shared and neutrally named volumes (#15), simulated, sent through the real ingest API into the real
database, then attributed. A shared volume (a storage system's volume every host's loader reads) has
no peers: every rank's data phase grows alike, no rank straggles, and only the volume's own history
shows its read latency rose. Local mounts are named with random strings: nothing says checkpoint."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import ids
from fabricscope.service.simulate.faults import Fault, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster, random_storage_names
from tests.correlate.scenarios import post

_slot = itertools.count()
ENGINE = AttributionEngine()


def _spec(seed: int) -> ClusterSpec:
    return dataclasses.replace(ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2),
                               **random_storage_names(np.random.default_rng(seed)))  # type: ignore[arg-type]


def _send(url: str, spec: ClusterSpec, faults: list[Fault], *, seed: int, name: str) -> Scenario:
    sc = generate(spec, job=f"e2e15-{name}-{next(_slot)}", steps=32, faults=faults, seed=seed,
                  t0=1.68e9 + next(_slot) * 5000.0)
    return post(url, sc)


def _named(conn: psycopg.Connection, sc: Scenario, f: Fault) -> list[Attribution]:
    """The attributions of the scenario's slow steps, each checked slow and naming `f`'s component
    as storage."""
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    out = []
    for t in slow:
        a = ENGINE.attribute_step(conn, job=sc.job, step=t.step)
        assert a is not None and a["slow"], (t, a)
        assert (a["layer"], a["component"]) == ("storage", f.component), a
        out.append(a)
    return out


def test_a_slow_shared_volume_is_named_from_its_own_history(service_url: str, db_conn: psycopg.Connection) -> None:
    spec = _spec(11)
    f = make_fault(build_cluster(spec), "shared_volume_slow", start_step=20, steps=4, severity=0.15,
                   rng=np.random.default_rng(0))
    assert f.component == f"{spec.storage_device}:{spec.shared_volume}"
    sc = _send(service_url, spec, [f], seed=7, name="shared")
    for a in _named(db_conn, sc, f):
        lat = [e for e in a["evidence"] if e["source"] == f.component and e["metric"] == "read_latency_seconds"]
        # the evidence compares the volume with its own past: several-fold above it
        assert lat and lat[0]["value"] > 1.5 * lat[0]["baseline"], a["evidence"]
        assert not [e for e in a["evidence"] if e.get("kind") == "timing"]  # no rank straggled
        assert a["rules"]["cause"] == ids.CAUSE_VOLUME_SIGNAL, a["rules"]  # the volume's own signal, no straggler
        assert a["confidence"] > 0.3, a
    for s in (t.step for t in sc.truth.values() if t.slow is False and t.step > 8):
        b = ENGINE.attribute_step(db_conn, job=sc.job, step=s)
        assert b is not None and not b["slow"] and b["rules"]["verdict"] == ids.VERDICT_UNDER_BAR, b


def test_a_quiet_shared_volume_is_not_blamed(service_url: str, db_conn: psycopg.Connection) -> None:
    """The shared volume comes back on every slow step (no peers), but only counts above its own
    history: a straggling GPU is still the GPU."""
    spec = _spec(12)
    f = make_fault(build_cluster(spec), "gpu_straggler", start_step=20, steps=3, severity=0.3,
                   rng=np.random.default_rng(1))
    sc = _send(service_url, spec, [f], seed=8, name="quiet")
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    for t in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and (a["layer"], a["component"]) == ("compute", f.component), a
        assert not [e for e in a["evidence"] if e["source"].startswith(spec.storage_device + ":")], a
        assert a["rules"]["cause"] == ids.CAUSE_STRAGGLER, a["rules"]


def test_a_slow_checkpoint_on_a_neutrally_named_volume_names_that_volume(service_url: str,
                                                                         db_conn: psycopg.Connection) -> None:
    spec = _spec(13)
    cluster = build_cluster(spec)
    f = make_fault(cluster, "storage_slow", start_step=19, steps=2, severity=0.3, variant="ckpt",
                   rng=np.random.default_rng(2))
    assert f.component == cluster.volumes[f.target] and "ckpt" not in f.component
    sc = _send(service_url, spec, [f], seed=9, name="ckpt")
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    for t in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and (a["layer"], a["component"]) == ("storage", f.component), a
        assert any(e["source"] == f.component and e["metric"] == "write_latency_seconds"
                   for e in a["evidence"]), a["evidence"]
        assert a["rules"]["cause"] == ids.CAUSE_STRAGGLER_VOLUME, a["rules"]  # its host's slow write, its volume


def test_a_slow_shared_volume_without_its_latency_series_is_named_from_the_loaders(
        service_url: str, db_conn: psycopg.Connection) -> None:
    """The volume's read_latency_seconds series never arrives (its collector does not report it): its
    ops and bytes keep their rate, so no telemetry shows the slowdown. Every rank's data phase grew
    alike and the job's hosts read one shared volume: that volume, from the loaders' timing."""
    spec = _spec(14)
    f = make_fault(build_cluster(spec), "shared_volume_slow", start_step=20, steps=4, severity=0.1,
                   rng=np.random.default_rng(3))
    sc = generate(spec, job=f"e2e15-nolat-{next(_slot)}", steps=32, faults=[f], seed=10,
                  t0=1.68e9 + next(_slot) * 5000.0)
    st = sc.streams
    lat = [k for k, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True))
           if s == f.component and m == "read_latency_seconds"]
    assert len(lat) == 1
    st.keep[lat[0], :] = False
    post(service_url, sc)
    for a in _named(db_conn, sc, f):
        assert not [e for e in a["evidence"] if e["metric"] == "read_latency_seconds"]
        row = next(e for e in a["evidence"] if e["metric"] in ("data_seconds", "episode_cause"))
        assert row["source"] == f.component, a["evidence"]
        # named from the loaders' timing, or (a step whose own loaders say less) from its episode's
        want = ids.CAUSE_SHARED_UNOBSERVED if row["metric"] == "data_seconds" else ids.CAUSE_EPISODE
        assert a["rules"]["cause"] == want, (a["step"], a["rules"])
