"""How a simulated job marks and places its checkpoints (#44): JobSpec.checkpoint_marks changes the
payloads only (events, the checkpoint phase), never the timings or the telemetry; checkpoint_to
"shared" moves the writes to the storage system's volume; the asked-for storage_slow variants
(ckpt_latency, shared_ckpt) raise the written volume's latency as much as they lengthen the write."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from fabricscope.core.errors import ConfigError, FabricscopeError
from fabricscope.service.simulate.faults import CKPT_LATENCY, SHARED_CKPT, Fault, make_fault, random_plan
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.model import JobSpec
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster

SPEC = ClusterSpec(hosts=4, gpus_per_host=2, nics_per_host=1, leaves=1, spines=1)
CLUSTER = build_cluster(SPEC)


def _gen(marks: Literal["events", "phase", "none"] = "events", to: Literal["local", "shared"] = "local",
         faults: list[Fault] | None = None) -> Scenario:
    return generate(SPEC, steps=34, faults=faults or [], seed=9,
                    job_spec=JobSpec(checkpoint_marks=marks, checkpoint_to=to))


def _writes(sc: Scenario, source: str) -> tuple[np.ndarray, np.ndarray]:
    """The source's written bytes per sample and its write latency."""
    st = sc.streams
    row = {m: i for i, (s, m) in enumerate(zip(st.sources, st.metrics, strict=True)) if s == source}
    return np.diff(st.values[row["write_bytes_total"]]), st.values[row["write_latency_seconds"]]


def test_marks_change_the_payloads_only() -> None:
    ev, ph, no = _gen("events"), _gen("phase"), _gen("none")
    assert [e["kind"] for e in ev.events_payload()] == ["checkpoint"] * 3 * len(CLUSTER.hosts)
    assert ph.events_payload() == [] and no.events_payload() == []
    ckpt = set(np.flatnonzero(ev.timeline.ckpt_steps).tolist())
    assert ckpt == {10, 20, 30}
    # phase: the checkpoint phase only in the steps that wrote one, as rec.phase reports it
    assert {s["step"] for s in ph.steps_payload() if "checkpoint" in s["phases"]} == ckpt
    assert all(s["phases"]["checkpoint"] > 0.5 for s in ph.steps_payload() if s["step"] in ckpt)
    assert not any("checkpoint" in s["phases"] for s in no.steps_payload())
    # the same job and telemetry all the same: the write is still in the step's time
    assert [(s["start"], s["end"]) for s in ev.steps_payload()] == [(s["start"], s["end"]) for s in no.steps_payload()]
    assert np.array_equal(ev.streams.values, no.streams.values) and ev.collectives_payload() == no.collectives_payload()


def test_shared_checkpoints_are_written_to_the_storage_systems_volume() -> None:
    local, shared = _gen(to="local"), _gen(to="shared")
    vol = CLUSTER.volumes[1]
    assert _writes(local, vol)[0].max() > 0 and _writes(shared, vol)[0].max() == 0  # the host's mount is idle
    assert CLUSTER.shared_source is not None and CLUSTER.shared_source not in [
        s for s, m in zip(local.streams.sources, local.streams.metrics, strict=True) if m.startswith("write")]
    written, lat = _writes(shared, CLUSTER.shared_source)
    assert written.sum() == pytest.approx(3 * len(CLUSTER.hosts) * JobSpec().ckpt_bytes, rel=1e-6)
    assert lat.max() > 2 * np.median(lat)  # writing raises it over its idle level
    # the reads are as they were: the writes come from draws after theirs
    reads = [i for i, (s, m) in enumerate(zip(local.streams.sources, local.streams.metrics, strict=True))
             if s == CLUSTER.shared_source]
    assert np.array_equal(local.streams.values[reads], shared.streams.values[reads])
    # the hook names the mount it wrote to, on its host
    assert {e["source"] for e in shared.events_payload()} == set(CLUSTER.volumes[1::2])


@pytest.mark.parametrize(("variant", "to"), [(CKPT_LATENCY, "local"), (SHARED_CKPT, "shared")])
def test_a_slow_checkpoint_volumes_latency_rises_with_the_write(variant: str, to: Literal["local", "shared"]) -> None:
    f = make_fault(CLUSTER, "storage_slow", variant=variant, start_step=20, steps=1, severity=0.8,
                   rng=np.random.default_rng(1))
    sc, healthy = _gen(to=to, faults=[f]), _gen(to=to)
    slower = sc.timeline.ckpt[20].max() / healthy.timeline.ckpt[20].max()
    assert 2.4 < slower < 3.6 and sc.truth[20].slow and sc.truth[20].component == f.component
    assert not sc.truth[10].slow and not sc.truth[30].slow
    _, lat = _writes(sc, f.component)
    _, usual = _writes(healthy, f.component)
    assert lat.max() == pytest.approx(slower * usual.max(), rel=0.15)
    if variant == SHARED_CKPT:
        assert f.component == CLUSTER.shared_source
        assert (sc.timeline.ckpt[20] > 2 * healthy.timeline.ckpt[20]).all()  # every host's write
    # a fault on a volume the job does not write to changes nothing
    assert not _gen(to="local" if to == "shared" else "shared", faults=[f]).truth[20].slow


def test_asked_for_variants_are_never_drawn_and_bad_options_raise() -> None:
    plan = random_plan(CLUSTER, np.random.default_rng(0), n_steps=400, n_faults=60, kinds=["storage_slow"])
    assert {f.variant for f in plan} == {"ckpt", "data"}
    with pytest.raises(FabricscopeError, match="checkpoint_marks"):
        JobSpec(checkpoint_marks="hook")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="shared volume"):
        generate(ClusterSpec(hosts=2, gpus_per_host=1, nics_per_host=1, leaves=1, spines=1, storage_device=""),
                 steps=12, job_spec=JobSpec(checkpoint_to="shared"))
