"""A shared volume that slows every loader while no telemetry of it shows why (#15): its latency
series missing, or sampled too coarsely for the step. Every rank's `data` phase lost the time alike
(baseline.py: data_timing), no rank straggles, so the storage layer is named from the loaders' own
timing, with the job's one shared volume as the component, at the confidence of a cause the
timings alone name. And a checkpoint step's slowest writer, a few sigmas out by a small share of
the lost time, does not take the cause from the loaders."""

from __future__ import annotations

import pandas as pd

from fabricscope.service.correlate.causes import LoaderLoss, WorkLoss, work_cause
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.decompose import Straggler
from fabricscope.service.correlate.localize import Topo, build_topo
from fabricscope.service.correlate.rules import ids

RANKS = pd.DataFrame({"host": ["h1", "h1", "h2", "h2"], "gpu": ["g0", "g1", "g0", "g1"], "nic": ["n0"] * 4})
NO_LINKS = pd.DataFrame({"a": [], "b": []})
NO_EVIDENCE = pd.DataFrame()
LOADERS = LoaderLoss(value_s=0.235, base_s=0.059, sigma_s=0.004, volumes=("qq7:w3",))


def _reading(*volumes: str) -> LoaderLoss:
    return LoaderLoss(value_s=0.235, base_s=0.059, sigma_s=0.004, volumes=volumes)


def _topo(volumes: list[str], ckpt: frozenset[str] = frozenset()) -> Topo:
    return build_topo(RANKS, NO_LINKS, volumes, ckpt)


def _ckpt_straggler(excess_s: float) -> Straggler:
    """h2's rank 2 wrote its checkpoint `excess_s` longer than the others (6 sigmas)."""
    return Straggler("checkpoint", False, 2, "h2", "g0", 0.79 + excess_s, 0.79, excess_s, 6.1, [2])


def test_the_one_shared_volume_is_named_from_the_loaders_timing() -> None:
    topo = _topo(["qq7:w3", "h1:/mnt/a", "h2:/mnt/a"])
    c = work_cause(None, NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.18, loaders=LOADERS))
    assert (c["layer"], c["component"]) == ("storage", "qq7:w3")
    assert c["rule"] == ids.CAUSE_SHARED_UNOBSERVED
    (row,) = c["evidence"]
    assert (row["metric"], row["kind"], row["value"], row["baseline"]) == ("data_seconds", "timing", 0.235, 0.059)
    assert row["score"] == 44.0  # (0.235 - 0.059) / 0.004
    # named from timings alone: under a cause its telemetry shows (storage_without_straggler_confidence)
    assert 0.2 < c["confidence"] < DEFAULT_CONFIG.storage_without_straggler_confidence


def test_without_the_loaders_loss_nothing_is_named() -> None:
    topo = _topo(["qq7:w3"])
    c = work_cause(None, NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.18))
    assert (c["layer"], c["rule"]) == ("unknown", ids.CAUSE_UNKNOWN)


def test_the_volume_named_is_the_one_the_loaders_read() -> None:
    topo = _topo(["qq7:w3", "qq7:w4", "zz2:w3"])  # a storage system serves other jobs' volumes too
    c = work_cause(None, NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.18, loaders=_reading("qq7:w4")))
    assert (c["layer"], c["component"], c["rule"]) == ("storage", "qq7:w4", ids.CAUSE_SHARED_UNOBSERVED)
    # several volumes of one system read during the step: that system
    c = work_cause(
        None, NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.18, loaders=_reading("qq7:w3", "qq7:w4"))
    )
    assert (c["layer"], c["component"], c["rule"]) == ("storage", "qq7", ids.CAUSE_SHARED_UNOBSERVED)
    # volumes of two systems, or none read: which one slowed the loaders, no timing can say
    for vols in (("qq7:w3", "zz2:w3"), ()):
        c = work_cause(None, NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.18, loaders=_reading(*vols)))
        assert c["layer"] == "unknown", vols


def test_a_checkpoint_writer_that_explains_little_does_not_take_the_loaders_loss() -> None:
    topo = _topo(["qq7:w3", "h2:/mnt/a"], frozenset({"h2:/mnt/a"}))
    # 58 ms of the 290 ms lost: the spread of a checkpoint's writers, not the cause
    c = work_cause(
        _ckpt_straggler(0.058), NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.26, work_s=0.29, loaders=LOADERS)
    )
    assert (c["layer"], c["component"], c["rule"]) == ("storage", "qq7:w3", ids.CAUSE_SHARED_UNOBSERVED)
    # the same writer 250 ms late explains the step: its volume
    c = work_cause(
        _ckpt_straggler(0.25), NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.26, work_s=0.29, loaders=LOADERS)
    )
    assert (c["layer"], c["component"]) == ("storage", "h2:/mnt/a")
    assert c["evidence"][0]["kind"] == "timing" and c["rule"] == ids.CAUSE_CHECKPOINT_UNOBSERVED
    # and with no loaders' loss the small writer still stands (nothing else to name)
    c = work_cause(_ckpt_straggler(0.058), NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.06, work_s=0.29))
    assert (c["layer"], c["component"], c["rule"]) == ("storage", "h2:/mnt/a", ids.CAUSE_CHECKPOINT_UNOBSERVED)


def test_shared_volumes_are_those_off_the_job_hosts() -> None:
    assert _topo(["qq7:w3", "h1:/mnt/a", "h2:/mnt/a", "zz2:w3"]).shared_volumes == ("qq7:w3", "zz2:w3")


def test_a_gpu_whose_excess_is_under_the_loaders_loss_does_not_take_it() -> None:
    """723 run 16 step 20, a checkpoint step inside a shared volume's slowdown: a GPU whose compute
    ran long by more than straggler_min_share of the lost work, but by less than every loader lost,
    is the ranks' spread, not the cause; one that lost more than the loaders is."""
    topo = _topo(["qq7:w3", "h1:/mnt/a", "h2:/mnt/a"])

    def gpu(excess_s: float) -> Straggler:
        return Straggler("compute", False, 2, "h2", "g0", 1.5 + excess_s, 1.5, excess_s, 6.0, [2])

    assert DEFAULT_CONFIG.straggler_min_share * 0.25 <= 0.12
    c = work_cause(gpu(0.12), NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.25, loaders=LOADERS))
    assert (c["layer"], c["component"], c["rule"]) == ("storage", "qq7:w3", ids.CAUSE_SHARED_UNOBSERVED)
    c = work_cause(gpu(0.2), NO_EVIDENCE, topo, 1.0, loss=WorkLoss(data_s=0.235, work_s=0.25, loaders=LOADERS))
    assert (c["layer"], c["component"], c["rule"]) == ("compute", "h2:g0", ids.CAUSE_STRAGGLER)
