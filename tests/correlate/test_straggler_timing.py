"""A GPU named from its own telemetry (the GPU scan, when the step's lost time looked like the
network's) that is also the straggler the ranks' clocks show gets the straggler's `timing` row and
a share of its gap to full confidence (#15, development seed 741 run 37: a faint step of a small
PCIe downtrain, named at 0.76 from pcie_link_generation, under the 0.8 a faint step needs, while
its GPU straggled at 12.9 sigmas)."""

from __future__ import annotations

from fabricscope.service.correlate.causes import with_straggler_timing
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.decompose import Straggler
from fabricscope.service.correlate.records import CauseDraft

ST = Straggler("compute", False, 48, "c-e32", "nv0", 1.64, 1.577, 0.063, 12.9, [48])


def _scan(component: str) -> CauseDraft:
    return {"layer": "compute", "component": component, "confidence": 0.76,
            "evidence": [{"source": component, "metric": "pcie_link_generation", "value": 3.0, "baseline": 4.0,
                          "score": 50.0, "unit": "value"}]}


def test_the_straggler_agrees_with_its_gpus_telemetry() -> None:
    (c,) = with_straggler_timing([_scan("c-e32:nv0")], ST)
    assert [e.get("kind") for e in c["evidence"]] == ["timing", None]
    row = c["evidence"][0]
    assert (row["source"], row["metric"], row["rank"], row["score"]) == ("c-e32:nv0", "compute_seconds", 48, 12.9)
    assert c["confidence"] == 0.76 + DEFAULT_CONFIG.device_evidence_boost * 0.24
    assert c["confidence"] >= DEFAULT_CONFIG.corroborate_faint_confidence


def test_another_component_or_a_cause_with_timing_is_left_alone() -> None:
    other = _scan("c-e32:nv1")
    assert with_straggler_timing([other], ST) == [other]
    timed = _scan("c-e32:nv0")
    timed["evidence"].append({"source": "c-e32:nv0", "metric": "compute_seconds", "value": 1.6, "baseline": 1.5,
                              "score": 9.0, "unit": "seconds", "kind": "timing"})
    assert with_straggler_timing([timed], ST) == [timed]
    assert with_straggler_timing([other], None) == [other]
