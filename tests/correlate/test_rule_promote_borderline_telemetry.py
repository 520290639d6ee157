"""Which evidence lets a step under the slow bar be slow (corroborate.corroborated, issue #15): a draft
attribution of the step as if it were slow (the step's own telemetry, rank and collective timings)
is judged by rules that could each fail. Only the draft is made up here; the rules are the engine's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fabricscope.service.correlate.causes import NET_LAYERS
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.corroborate import STORAGE_ONLY, Demand, Judge, corroborated
from fabricscope.service.correlate.records import Attribution

HOST_OF = {"h3": "h3", "h3:nic1": "h3", "h3:/data": "h3", "h3:gpu2": "h3", "h5": "h5"}
TCP = {"source": "h3", "metric": "tcp_retransmitted_segments_total", "score": 3.3, "kind": None}
ROW_TIMING = {"source": "h3", "metric": "checkpoint_seconds", "score": 7.9, "kind": "timing", "value": 1.1,
              "baseline": 0.8}
ROW_WRITE = {"source": "h3:/data", "metric": "write_latency_seconds", "score": 13.2, "kind": None}
OTHER_HOST_TIMING = {"source": "h5", "metric": "data_seconds", "score": 9.0, "kind": "timing", "value": 0.4,
                     "baseline": 0.1}


def _out() -> Attribution:
    return {"step": 40, "slow": False, "duration_s": 2.1, "baseline_s": 2.0, "start": None, "layer": "none",
            "component": None, "confidence": 1.0, "lost_s": 0.0, "evidence": [], "causes": []}


def _explain(layer: str, component: str, conf: float, rows: list[dict[str, Any]]) -> Callable[..., None]:
    def explain(into: Attribution, corroborating: bool = False, own_span: bool = False) -> None:
        assert corroborating  # the draft is built on the step's own window only
        into.update({"layer": layer, "component": component, "confidence": conf,
                     "evidence": [dict(r) for r in rows]})  # type: ignore[typeddict-item]
    return explain


def _judge(explain: Callable[..., None], **kw: Any) -> tuple[bool, Attribution]:
    out = _out()
    ok = corroborated(out, Judge(explain, DEFAULT_CONFIG, 2.0, 0.05, HOST_OF), Demand(**kw))
    return ok, out


FAINT = DEFAULT_CONFIG.corroborate_faint_confidence
MIN = DEFAULT_CONFIG.corroborate_min_confidence


def test_a_weak_network_cause_on_a_faint_step_needs_the_steps_own_collectives() -> None:
    tcp = _explain("nic", "h3", 0.29, [TCP])
    assert not _judge(tcp, need=FAINT)[0]
    ok, out = _judge(tcp, need=FAINT, net_timing=True)
    assert ok and out["slow"] and (out["layer"], out["component"]) == ("nic", "h3")
    assert out["evidence"][-1]["kind"] == "corroborated"
    # ...and never under the borderline tier's own bar
    assert not _judge(_explain("nic", "h3", MIN - 0.01, [TCP]), need=FAINT, net_timing=True)[0]


def test_next_to_a_slow_step_a_network_cause_counts_its_collectives_as_the_steps_own_timing() -> None:
    link = _explain("link", "leaf1:p3", 0.9, [{"source": "leaf1:p3", "metric": "symbol_errors_total",
                                               "score": 50.0, "kind": None}])
    assert not _judge(link, need=MIN, own_timing=True)[0]
    assert _judge(link, need=MIN, own_timing=True, net_timing=True)[0]
    # the collectives say nothing of a host's cause: it still needs the host's own rank timings
    host = _explain("host", "h3", 0.9, [{"source": "h3", "metric": "cpu_busy_ratio", "score": 9.0, "kind": None}])
    assert not _judge(host, need=MIN, own_timing=True, net_timing=True)[0]
    assert not _judge(_explain("host", "h3", 0.9, [OTHER_HOST_TIMING]), need=MIN, own_timing=True)[0]
    assert _judge(_explain("host", "h3", 0.9, [ROW_TIMING]), need=MIN, own_timing=True)[0]


@pytest.mark.parametrize(("rows", "want"), [([ROW_TIMING, ROW_WRITE], True), ([ROW_TIMING], False),
                                            ([ROW_WRITE], False), ([OTHER_HOST_TIMING, ROW_WRITE], False)])
def test_a_checkpoint_step_just_over_its_baseline_needs_the_hosts_write_timing_and_its_volume(
        rows: list[dict[str, Any]], want: bool) -> None:
    vol = _explain("storage", "h3:/data", 0.68, rows)
    assert _judge(vol, need=MIN, own_timing=True, own_device=True)[0] is want


def test_a_checkpoint_step_just_over_its_baseline_takes_a_network_cause_its_collectives_show() -> None:
    # a link's errors at a checkpoint step: the errors are on a host's NIC, not the switch port's
    # host, and no host wrote slowly; the step's own collectives lost the time, which is its timing
    link = _explain("link", "leaf1:p3", 0.88, [{"source": "h3:nic1", "metric": "symbol_errors_total",
                                                "score": 60.0, "kind": None}])
    assert not _judge(link, need=MIN, own_timing=True, own_device=True)[0]
    assert _judge(link, need=MIN, own_timing=True, own_device=True, net_timing=True)[0]
    # ...and a storage cause still needs its host's write timing and its volume
    assert not _judge(_explain("storage", "h3:/data", 0.68, [ROW_WRITE]), need=MIN, own_timing=True,
                      own_device=True, net_timing=True)[0]


def test_a_faint_step_between_two_slow_steps_of_one_cause_needs_only_to_name_it() -> None:
    seen: list[tuple[str, str | None]] = []

    def between(cause: tuple[str, str | None]) -> bool:
        seen.append(cause)
        return cause == ("nic", "h3")

    tcp = _explain("nic", "h3", 0.29, [TCP])
    assert _judge(tcp, need=FAINT, between=between)[0] and seen == [("nic", "h3")]
    assert not _judge(_explain("nic", "h5", 0.29, [TCP]), need=FAINT, between=between)[0]
    assert not _judge(_explain("unknown", "h3", 0.29, []), need=FAINT, between=between)[0]
    # a sure cause does not ask its neighbours
    seen.clear()
    assert _judge(_explain("nic", "h3", 0.9, [TCP]), need=FAINT, between=between)[0] and not seen


def test_a_step_over_only_in_its_collectives_takes_only_a_network_cause() -> None:
    link = _explain("link", "leaf1:p3", 0.5, [{"source": "leaf1:p3", "metric": "symbol_errors_total",
                                               "score": 20.0, "kind": None}])
    assert _judge(link, need=MIN, only_layers=NET_LAYERS, net_timing=True)[0]
    assert not _judge(link, need=MIN, only_layers=NET_LAYERS)[0]
    assert not _judge(_explain("host", "h3", 0.95, [ROW_TIMING]), need=MIN, only_layers=NET_LAYERS, net_timing=True)[0]


GPU_TIMING = {"source": "h3:gpu2", "metric": "compute_seconds", "score": 11.2, "kind": "timing", "value": 1.588,
              "baseline": 1.51}
GPU_PCIE = {"source": "h3:gpu2", "metric": "pcie_link_generation", "score": 40.0, "kind": None}


def test_a_step_over_only_in_its_collectives_takes_a_gpu_its_own_device_telemetry_shows() -> None:
    """A GPU whose PCIe link trained down slows the ring it sits in: its loss is in the collectives'
    transfer time (723 run 0 step 18). Its device row counts; its compute timing alone does not."""
    pcie = _explain("compute", "h3:gpu2", 0.83, [GPU_TIMING, GPU_PCIE])
    ok, out = _judge(pcie, need=MIN, only_layers=NET_LAYERS, net_timing=True)
    assert ok and (out["layer"], out["component"]) == ("compute", "h3:gpu2")
    assert not _judge(pcie, need=MIN, only_layers=NET_LAYERS)[0]  # the collectives must have lost the time
    assert not _judge(_explain("compute", "h3:gpu2", 0.83, [GPU_TIMING]), need=MIN, only_layers=NET_LAYERS,
                      net_timing=True)[0]
    weak = {**GPU_PCIE, "score": 2.0}  # under MIN_SCORE: not a finding
    assert not _judge(_explain("compute", "h3:gpu2", 0.83, [GPU_TIMING, weak]), need=MIN,
                      only_layers=NET_LAYERS, net_timing=True)[0]


def test_a_step_over_only_in_its_ranks_data_phase_takes_only_a_storage_cause() -> None:
    vol = _explain("storage", "nas1:vol7", 0.6, [{"source": "nas1:vol7", "metric": "read_latency_seconds",
                                                  "score": 9.0, "kind": None}])
    assert _judge(vol, need=MIN, only_layers=STORAGE_ONLY, data_timing=True)[0]
    # the data phase must have lost the time itself, and only a storage cause answers for it
    assert not _judge(vol, need=MIN, only_layers=STORAGE_ONLY)[0]
    assert not _judge(_explain("host", "h3", 0.95, [ROW_TIMING]), need=MIN, only_layers=STORAGE_ONLY,
                      data_timing=True)[0]
    link = _explain("link", "leaf1:p3", 0.9, [{"source": "leaf1:p3", "metric": "symbol_errors_total",
                                               "score": 50.0, "kind": None}])
    assert not _judge(link, need=MIN, only_layers=STORAGE_ONLY, data_timing=True, net_timing=True)[0]


def test_next_to_a_slow_step_a_shared_volume_counts_the_ranks_data_phase_as_the_steps_own_timing() -> None:
    # a shared volume slows every rank's loader alike: no straggler, so no `timing` row of a host
    vol = _explain("storage", "nas1:vol7", 0.74, [{"source": "nas1:vol7", "metric": "read_latency_seconds",
                                                   "score": 27.0, "kind": None}])
    assert not _judge(vol, need=MIN, own_timing=True)[0]
    ok, out = _judge(vol, need=MIN, own_timing=True, data_timing=True)
    assert ok and (out["layer"], out["component"]) == ("storage", "nas1:vol7")
    # the data phase says nothing of the network: a link cause still needs its collectives
    link = _explain("link", "leaf1:p3", 0.9, [{"source": "leaf1:p3", "metric": "symbol_errors_total",
                                               "score": 50.0, "kind": None}])
    assert not _judge(link, need=MIN, own_timing=True, data_timing=True)[0]
    # a faint step's storage cause needs only the borderline tier's bar with its data phase, never less
    weak = _explain("storage", "nas1:vol7", 0.3, [{"source": "nas1:vol7", "metric": "read_latency_seconds",
                                                   "score": 4.0, "kind": None}])
    assert not _judge(weak, need=FAINT)[0]
    assert _judge(weak, need=FAINT, data_timing=True)[0]
    assert not _judge(_explain("storage", "nas1:vol7", MIN - 0.01, []), need=FAINT, data_timing=True)[0]


@pytest.mark.parametrize(("excess", "want"), [(0.09, True), (0.04, False)])
def test_a_checkpoint_step_just_over_its_baseline_takes_a_loader_straggler_that_holds_its_excess(
        excess: float, want: bool) -> None:
    # a slow loader at a checkpoint step (decompose.find_straggler: besides the write) needs no
    # device row when its own excess is at least FAINT_REL of the step, what made the step faint
    row = {"source": "h3", "metric": "data_seconds", "value": 0.05 + excess, "baseline": 0.05, "score": 12.0,
           "kind": "timing"}
    host = _explain("host", "h3", 0.85, [row])
    assert _judge(host, need=FAINT, own_timing=True, own_device=True)[0] is want
    # a slow write is not such a straggler: the writes' spread is what own_device guards against
    write = {**row, "metric": "checkpoint_seconds", "value": 0.8 + excess, "baseline": 0.8}
    assert not _judge(_explain("host", "h3", 0.85, [write]), need=FAINT, own_timing=True, own_device=True)[0]



def test_a_straggler_that_holds_little_of_the_steps_excess_names_nothing_alone() -> None:
    """731 run 19 step 44, a fault-free run: a step +4.6 % (96 ms) whose draft rested on one GPU's
    compute timing 25 ms over its baseline (5.6 sigmas). A straggler holding straggler_min_share of
    what the step lost may name it; one holding a quarter of it, with no device row, may not."""
    def judge(rows: list[dict[str, Any]]) -> bool:
        out = _out()
        out["duration_s"] = 2.096
        return corroborated(out, Judge(_explain("compute", "h3:gpu2", 0.65, rows), DEFAULT_CONFIG, 2.0, 0.05,
                                       HOST_OF), Demand(MIN))

    small = {**GPU_TIMING, "value": 1.705, "baseline": 1.680}
    assert not judge([small])
    assert judge([{**GPU_TIMING, "value": 1.72, "baseline": 1.680}])  # 40 of the 96 ms
    # a device row of the GPU's own is evidence of its own, whatever the timing holds
    assert judge([small, GPU_PCIE])


def test_only_a_gpus_own_state_that_alone_slows_it_counts_as_its_origin_state() -> None:
    """`origin_state` (a GPU fault's long gaps and edges): its PCIe link under the maximum or a
    slowing throttle flag counts; its clock in the step, a counter's rate or a volume's latency
    gauge does not."""
    def between(cause: tuple[str, str | None]) -> bool:
        return True

    width = {"source": "h3:gpu2", "metric": "pcie_link_width", "value": 8.0, "baseline": 16.0, "score": 50.0,
             "unit": "value"}
    timing = {"source": "h3:gpu2", "metric": "compute_seconds", "value": 1.7, "baseline": 1.6, "score": 9.0,
              "unit": "seconds", "kind": "timing"}
    replays = {"source": "h3:gpu2", "metric": "pcie_replays_total", "value": 10.0, "baseline": 0.0, "score": 5.0,
               "unit": "per_second"}
    latency = {"source": "h3:/data", "metric": "read_latency_seconds", "value": 0.006, "baseline": 0.001,
               "score": 9.0, "unit": "value"}
    kw: dict[str, Any] = {"need": 0.25, "between": between, "require_between": True, "origin_state": True}
    assert _judge(_explain("compute", "h3:gpu2", 0.7, [timing, width]), **kw)[0]
    assert not _judge(_explain("compute", "h3:gpu2", 0.7, [timing, replays]), **kw)[0]
    assert not _judge(_explain("storage", "h3:/data", 0.7, [latency]), **kw)[0]
    # a state of another GPU is not this one's
    assert not _judge(_explain("compute", "h3:gpu1", 0.7, [width]), **kw)[0]
    # without origin_state, a straggler's clock and its replays do
    assert _judge(_explain("compute", "h3:gpu2", 0.7, [timing, replays]), need=0.25, between=between,
                  require_between=True)[0]


def test_a_queues_watermark_is_no_state_of_the_steps_own_seconds() -> None:
    """`own_state` (a gap between a fault's slow steps): a queue's watermark is the peak since its
    last read, so a 10-s reading holds a fault's seconds after the step (779 run 65: a one-step
    incast's watermark filled the two steps before it in). Its occupancy, a state, still counts.
    Rule: a peak-since-last-read gauge is no state the step ran in (localize.PEAK_GAUGES,
    causes.has_state_row)."""
    def between(cause: tuple[str, str | None]) -> bool:
        return True

    def queue(metric: str) -> dict[str, Any]:
        return {"source": "leaf1:p3", "metric": metric, "value": 3.4e6, "baseline": 2.2e5, "score": 9.0,
                "unit": "value", "labels": {"queue": "3"}}

    kw: dict[str, Any] = {"need": MIN, "between": between, "require_between": True, "own_state": True}
    assert not _judge(_explain("fabric", "leaf1:p3", 0.9, [queue("queue_watermark_bytes")]), **kw)[0]
    assert _judge(_explain("fabric", "leaf1:p3", 0.9, [queue("queue_occupancy_bytes")]), **kw)[0]
    # without own_state the watermark is evidence like any other
    assert _judge(_explain("fabric", "leaf1:p3", 0.9, [queue("queue_watermark_bytes")]), need=MIN,
                  between=between, require_between=True)[0]


def test_a_network_cause_whose_collectives_lost_nothing_needs_both_sides_to_name_it() -> None:
    """787 run 3 step 61: a lossy incast ended in the step before; its drop counters' span reached into
    this step, which lost 67 ms while its collectives lost 4 ms. A network fault slows the collectives.
    Rule: a network cause corroborates a step on its own only when its collectives lost a share of the loss
    (EngineConfig.net_min_share)."""
    drops = _explain("fabric", "leaf1:p3", 0.83, [{"source": "leaf1:p3", "metric": "queue_dropped_packets_total",
                                                   "score": 15.9, "kind": None}])
    lost = 0.1  # the draft's step: 2.1 s against a 2.0-s baseline
    share = DEFAULT_CONFIG.net_min_share
    assert _judge(drops, need=MIN)[0]  # not asked: as before
    assert not _judge(drops, need=MIN, net_lost=0.004)[0]
    assert not _judge(drops, need=MIN, net_lost=share * lost - 0.002)[0]
    assert _judge(drops, need=MIN, net_lost=share * lost + 0.002)[0]
    # both sides slow with the same cause: inside its fault, the step's noise may hide its share
    assert _judge(drops, need=MIN, net_lost=0.0, between=lambda c: c == ("fabric", "leaf1:p3"))[0]
    assert not _judge(drops, need=MIN, net_lost=0.0, between=lambda c: False)[0]
    # a cause off the network (a GPU) is not asked about the collectives
    gpu = _explain("compute", "h3:gpu2", 0.83, [{"source": "h3:gpu2", "metric": "pcie_link_width", "score": 50.0,
                                                 "kind": None}])
    assert _judge(gpu, need=MIN, net_lost=0.0)[0]
