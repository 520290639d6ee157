"""GPU and host evidence rules (#17) on frames shaped like queries.device_rows: pure functions."""

from __future__ import annotations

import json
import math

import pandas as pd

from fabricscope.service.correlate.causes import add_device_rows, gpu_cause, merge_same
from fabricscope.service.correlate.devices import (
    GPU_RULES,
    HOST_RULES,
    ORIGIN_RULES,
    covered,
    judge,
    state_runs,
    xid_rows,
)
from fabricscope.service.correlate.localize import build_topo, candidates, rank_candidates

NAN = math.nan
COLS = ["source", "metric", "labels", "wmin", "wmax", "wrate", "hval", "hrate", "hsig"]


def _rows(*rows: tuple) -> pd.DataFrame:
    return pd.DataFrame([(*r[:2], json.dumps(r[2]) if r[2] else None, *r[3:]) for r in rows], columns=COLS)


def _metrics(found: dict, src: str) -> dict[str, dict]:
    return {row["metric"]: row for _, row in found.get(src, [])}


def test_a_slowing_throttle_reason_counts_and_an_idle_or_power_cap_one_does_not() -> None:
    g = "n1:gpu3"
    rows = _rows((g, "gpu_throttle_active", {"reason": "sw_thermal"}, 0, 1, NAN, 0, NAN, NAN),
                 (g, "gpu_throttle_active", {"reason": "gpu_idle"}, 0, 1, NAN, 0, NAN, NAN),
                 (g, "gpu_throttle_active", {"reason": "sw_power_cap"}, 0, 1, NAN, 0, NAN, NAN))
    found = judge(rows, GPU_RULES)[g]
    assert [(r["metric"], r["labels"]) for _, r in found] == [("gpu_throttle_active", {"reason": "sw_thermal"})]
    # a flag that was already set in the GPU's own past is its normal state, not news
    assert not judge(_rows((g, "gpu_throttle_active", {"reason": "hw_slowdown"}, 1, 1, NAN, 1, NAN, NAN)),
                     GPU_RULES)


def test_sm_clock_is_judged_against_the_lower_of_its_maximum_and_its_peers() -> None:
    g = "n1:gpu0"
    rows = _rows((g, "gpu_sm_clock_hz", None, 1.55e9, 1.6e9, NAN, 1.6e9, NAN, NAN),
                 (g, "gpu_sm_clock_max_hz", None, 1.98e9, 1.98e9, NAN, 1.98e9, NAN, NAN))
    # against its maximum alone, 1.55 GHz is 22% low ...
    clock = _metrics(judge(rows, GPU_RULES), g)["gpu_sm_clock_hz"]
    assert (clock["value"], clock["baseline"]) == (1.55e9, 1.98e9)
    # ... but every power-capped peer runs at 1.6 GHz: 3% under them is no throttle
    assert not judge(rows, GPU_RULES, {"gpu_sm_clock_hz": 1.6e9})
    slow = _metrics(judge(rows, GPU_RULES, {"gpu_sm_clock_hz": 1.8e9}), g)["gpu_sm_clock_hz"]
    assert slow["baseline"] == 1.8e9 and slow["score"] > 10


def test_pcie_link_below_its_maximum_width_or_generation() -> None:
    g = "n2:gpu1"
    rows = _rows((g, "pcie_link_width", None, 8, 8, NAN, 16, NAN, NAN),
                 (g, "pcie_link_width_max", None, 16, 16, NAN, 16, NAN, NAN),
                 (g, "pcie_link_generation", None, 5, 5, NAN, 5, NAN, NAN),
                 (g, "pcie_link_generation_max", None, 5, 5, NAN, 5, NAN, NAN))
    found = _metrics(judge(rows, GPU_RULES), g)
    assert set(found) == {"pcie_link_width"}
    assert (found["pcie_link_width"]["value"], found["pcie_link_width"]["baseline"]) == (8, 16)
    # without its maximum there is nothing to compare a width with
    assert not judge(rows[rows["metric"] != "pcie_link_width_max"], GPU_RULES)


def test_a_maximum_in_a_collectors_gap_is_its_value_in_the_gpus_own_past() -> None:
    """777 run 7 step 28: the width read 4 in the step while its maximum's series had a gap (no
    reading in the step nor in the 30 s before it). A capability holds between readings: its value
    in the source's own past is the reference; with none at all, still nothing to compare with."""
    g = "n2:gpu1"
    gap = _rows((g, "pcie_link_width", None, 4, 16, NAN, 16, NAN, NAN),
                (g, "pcie_link_width_max", None, NAN, NAN, NAN, 16, NAN, NAN))
    row = _metrics(judge(gap, GPU_RULES), g)["pcie_link_width"]
    assert (row["value"], row["baseline"]) == (4, 16)
    # a maximum read in the window wins over its past (a GPU swapped for one with a wider link)
    swapped = _rows((g, "pcie_link_width", None, 16, 16, NAN, 8, NAN, NAN),
                    (g, "pcie_link_width_max", None, 16, 16, NAN, 8, NAN, NAN))
    assert not judge(swapped, GPU_RULES)
    never = _rows((g, "pcie_link_width", None, 4, 16, NAN, 16, NAN, NAN),
                  (g, "pcie_link_width_max", None, NAN, NAN, NAN, NAN, NAN, NAN))
    assert not judge(never, GPU_RULES)


def test_counter_rates_must_clear_their_own_past_by_the_floor_and_three_sigma() -> None:
    h = "n3"
    quiet = _rows((h, "cpu_pressure_seconds_total", {"level": "some"}, NAN, NAN, 0.12, NAN, 0.04, 0.01))
    assert not judge(quiet, HOST_RULES)  # +0.08 s/s: under the 0.1 floor
    noisy = _rows((h, "cpu_pressure_seconds_total", {"level": "some"}, NAN, NAN, 0.5, NAN, 0.04, 0.2))
    assert not judge(noisy, HOST_RULES)  # +0.46 s/s, but its own past swings by 3 x 0.2
    starved = _rows((h, "cpu_pressure_seconds_total", {"level": "some"}, NAN, NAN, 0.7, NAN, 0.04, 0.01))
    row = _metrics(judge(starved, HOST_RULES), h)["cpu_pressure_seconds_total"]
    assert row["unit"] == "per_second" and row["labels"] == {"level": "some"} and row["baseline"] == 0.04


def test_xid_rows_carry_the_code_per_gpu() -> None:
    ev = pd.DataFrame({"source": ["n1:gpu2", "n1:gpu2", "n4:gpu0"], "start_ts": [1, 2, 3],
                       "attrs": ['{"code": 48}', '{"code": 48}', '{"code": 94}']})
    got = xid_rows(ev)
    assert got["n1:gpu2"] == [{"source": "n1:gpu2", "metric": "gpu_xid", "value": 2.0, "baseline": 0.0,
                               "score": 10.0, "unit": "events", "kind": "event", "labels": {"code": "48"}}]
    assert got["n4:gpu0"][0]["labels"] == {"code": "94"}


def test_a_straggler_with_agreeing_telemetry_gains_confidence_and_keeps_its_timing_first() -> None:
    timing = {"source": "n1:gpu3", "metric": "compute_seconds", "value": 2.0, "baseline": 1.6, "score": 40.0,
              "unit": "seconds", "kind": "timing"}
    cause = {"layer": "compute", "component": "n1:gpu3", "confidence": 0.6, "evidence": [timing]}
    row = {"source": "n1:gpu3", "metric": "pcie_link_width", "value": 8.0, "baseline": 16.0, "score": 50.0,
           "unit": "value"}
    out = add_device_rows(cause, [row])  # type: ignore[arg-type,list-item]
    assert out["evidence"] == [timing, row] and out["confidence"] > 0.6
    assert add_device_rows(cause, []) is cause  # type: ignore[arg-type]


def test_gpu_named_from_telemetry_alone_and_merged_with_its_straggler_cause() -> None:
    row = {"source": "n2:gpu1", "metric": "pcie_link_width", "value": 8.0, "baseline": 16.0, "score": 50.0,
           "unit": "value"}
    weak = {**row, "source": "n3:gpu0", "metric": "gpu_throttle_active", "score": 10.0}
    c = gpu_cause({"n2:gpu1": [row], "n3:gpu0": [weak]})  # type: ignore[dict-item]
    assert c is not None and (c["layer"], c["component"]) == ("compute", "n2:gpu1")
    alone = gpu_cause({"n2:gpu1": [row]})  # type: ignore[dict-item]
    assert alone is not None and alone["confidence"] > c["confidence"]  # a runner-up lowers it
    assert gpu_cause({}) is None
    work = {"layer": "compute", "component": "n2:gpu1", "confidence": 0.7, "evidence": [row], "lost_s": 0.2}
    unk = {"layer": "unknown", "component": None, "confidence": 0.2, "evidence": [], "lost_s": 0.05}
    merged = merge_same([work, {**c, "lost_s": 0.1}, unk])  # type: ignore[list-item]
    assert [(m["layer"], m["component"]) for m in merged] == [("compute", "n2:gpu1"), ("unknown", None)]
    assert math.isclose(merged[0]["lost_s"], 0.3) and merged[0]["evidence"] == [row]


def test_gpu_and_host_roles_come_from_the_placement_and_tcp_points_at_the_hosts_nic() -> None:
    ranks = pd.DataFrame({"rank": [0, 1, 2, 3], "host": ["a7", "a7", "b2", "b2"],
                          "gpu": ["gpu0", "gpu1", "gpu0", "gpu1"], "nic": ["eth0", "eth0", "mlx5_0", "mlx5_1"]})
    links = pd.DataFrame({"a": ["a7:eth0", "b2:mlx5_0", "b2:mlx5_1"], "b": ["sw:1", "sw:2", "sw:3"]})
    topo = build_topo(ranks, links, [])
    assert topo.role["a7:gpu1"] == "gpu" and topo.role["b2"] == "host" and topo.host_of["b2:gpu0"] == "b2"
    # a7's ranks share one NIC: its retransmits point there; b2's use two: only the host can be named
    assert topo.host_nic == {"a7": "a7:eth0", "b2": "b2"}
    scored = pd.DataFrame([("a7", "host", "tcp_retransmitted_segments_total", 40.0),
                           ("b2", "host", "tcp_timeouts_total", 6.0)], columns=["source", "role", "metric", "score"])
    top = rank_candidates(candidates(scored, topo), ("nic", "link", "fabric"))
    assert list(zip(top["layer"], top["component"], strict=True)) == [("nic", "a7:eth0"), ("nic", "b2")]


def test_a_reference_is_the_highest_window_value_of_its_metric_skipping_missing_readings() -> None:
    g = "n3:gpu2"
    width = (g, "pcie_link_width", None, 8, 8, NAN, 16, NAN, NAN)
    # two readings of the maximum (labels differ): the higher one counts, a missing one is skipped
    rows = _rows(width, (g, "pcie_link_width_max", {"port": "a"}, NAN, NAN, NAN, 16, NAN, NAN),
                 (g, "pcie_link_width_max", {"port": "b"}, 8, 8, NAN, 16, NAN, NAN),
                 (g, "pcie_link_width_max", {"port": "c"}, 16, 16, NAN, 16, NAN, NAN))
    assert _metrics(judge(rows, GPU_RULES), g)["pcie_link_width"]["baseline"] == 16
    # only missing readings, in the window and in the GPU's past: no reference, no finding (with a
    # past, test_a_maximum_in_a_collectors_gap_is_its_value_in_the_gpus_own_past)
    assert not judge(_rows(width, (g, "pcie_link_width_max", None, NAN, NAN, NAN, NAN, NAN, NAN)), GPU_RULES)
    # another GPU's maximum is not this one's reference
    assert not judge(_rows(width, ("n3:gpu5", "pcie_link_width_max", None, 16, 16, NAN, 16, NAN, NAN)), GPU_RULES)


def _readings(*rows: tuple) -> pd.DataFrame:
    """Frames shaped like queries.readings: (metric, labels, ts, value), oldest first."""
    return pd.DataFrame([(m, json.dumps(lab) if lab else None, ts, v) for m, lab, ts, v in rows],
                        columns=["metric", "labels", "ts", "value"]).sort_values("ts")


def test_a_states_span_runs_from_its_first_to_its_last_reading_in_it() -> None:
    """Rule: a state surely held from its first to its last reading in it, not halfway to the readings either side
    (devices.state_runs)."""
    origin = ORIGIN_RULES
    width = [("pcie_link_width_max", None, t, 16) for t in (100.0, 102.0, 104.0, 106.0, 108.0)]
    # trained down between the readings at 102 and 104, back between 106 and 108: surely 104 to 106
    rows = _readings(*width, ("pcie_link_width", None, 100.0, 16), ("pcie_link_width", None, 102.0, 16),
                     ("pcie_link_width", None, 104.0, 8), ("pcie_link_width", None, 106.0, 4),
                     ("pcie_link_width", None, 108.0, 16))
    assert state_runs(rows, origin) == [(104.0, 106.0)]
    assert covered(state_runs(rows, origin), 103.0, 105.0) == 1.0
    assert covered(state_runs(rows, origin), 100.0, 103.0) == 0.0
    # still in the state at its last reading: the run ends there
    assert state_runs(rows[rows["ts"] < 108.0], origin) == [(104.0, 106.0)]
    # at its maximum throughout, or without a maximum to compare with: no state
    assert state_runs(_readings(*width, ("pcie_link_width", None, 104.0, 16)), origin) == []
    assert state_runs(rows[rows["metric"] == "pcie_link_width"], origin) == []
    # a throttle flag alike, each series on its own; an idle GPU's flag is no such state
    flags = _readings(("gpu_throttle_active", {"reason": "gpu_idle"}, 99.0, 1),
                      ("gpu_throttle_active", {"reason": "gpu_idle"}, 103.0, 1),
                      ("gpu_throttle_active", {"reason": "hw_slowdown"}, 100.0, 0),
                      ("gpu_throttle_active", {"reason": "hw_slowdown"}, 101.0, 1),
                      ("gpu_throttle_active", {"reason": "hw_slowdown"}, 103.0, 1))
    assert state_runs(flags, origin) == [(101.0, 103.0)]
    assert state_runs(pd.concat([rows, flags]).sort_values("ts", kind="stable"), origin) == [
        (101.0, 103.0), (104.0, 106.0)]
    assert state_runs(rows.iloc[0:0], origin) == []
