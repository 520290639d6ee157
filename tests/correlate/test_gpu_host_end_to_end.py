"""GPU and host faults (#17) simulated, sent through the real ingest API into the real database, then
attributed: the engine names the GPU, host or NIC, and its evidence rows say why."""

from __future__ import annotations

import itertools

import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.records import EvidenceRow
from fabricscope.service.correlate.rules import ids
from fabricscope.service.simulate.faults import Fault, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS = 32
_slot = itertools.count()
ENGINE = AttributionEngine()

# the cause rule that names each kind: the GPU or host its ranks waited for, or the network's signals
CAUSE_RULES = {"gpu_thermal_throttle": ids.CAUSE_STRAGGLER, "pcie_downtrain": ids.CAUSE_STRAGGLER,
               "gpu_xid": ids.CAUSE_STRAGGLER, "cpu_starved_loader": ids.CAUSE_HOST_STRAGGLER,
               "tcp_retransmits": ids.CAUSE_NETWORK_SIGNAL}

# kind, variant, the evidence metrics of which at least one must be present on every slow step
CASES: list[tuple[str, str, set[str]]] = [
    ("gpu_thermal_throttle", "sw_thermal", {"gpu_throttle_active", "gpu_sm_clock_hz"}),
    ("gpu_thermal_throttle", "hw_slowdown", {"gpu_throttle_active", "gpu_sm_clock_hz"}),
    ("pcie_downtrain", "width", {"pcie_link_width"}),
    ("pcie_downtrain", "gen", {"pcie_link_generation"}),
    ("gpu_xid", "", {"gpu_xid"}),
    ("cpu_starved_loader", "", {"cpu_pressure_seconds_total"}),
    ("tcp_retransmits", "", {"tcp_retransmitted_segments_total"}),
]


def _send(url: str, faults: list[Fault], *, seed: int, name: str, spec: ClusterSpec = SPEC) -> Scenario:
    sc = generate(spec, job=f"e2e17-{name}-{next(_slot)}", steps=STEPS, faults=faults, seed=seed,
                  t0=1.69e9 + next(_slot) * 5000.0)
    return post(url, sc)


def _stored(conn: psycopg.Connection, e: EvidenceRow, lo: float, hi: float) -> tuple[float, float]:
    """The min and max a telemetry evidence row's series had (value for gauges, rate for counters)."""
    row = conn.execute(
        "SELECT min(CASE WHEN metric LIKE '%%_total' THEN rate ELSE value END), "
        "max(CASE WHEN metric LIKE '%%_total' THEN rate ELSE value END) FROM sample_view "
        "WHERE source = %s AND metric = %s AND ts > to_timestamp(%s) AND ts <= to_timestamp(%s)",
        (e["source"], e["metric"], lo, hi)).fetchone()
    assert row is not None and row[0] is not None, e
    return float(row[0]), float(row[1])


@pytest.mark.parametrize(("kind", "variant", "why"), CASES, ids=[f"{k}-{v}" if v else k for k, v, _ in CASES])
def test_gpu_and_host_faults_are_named_with_evidence(service_url: str, db_conn: psycopg.Connection, kind: str,
                                                     variant: str, why: set[str]) -> None:
    rng = np.random.default_rng(len(kind) + len(variant))
    f = make_fault(build_cluster(SPEC), kind, start_step=20, steps=3, severity=0.3, variant=variant, rng=rng)
    sc = _send(service_url, [f], seed=5, name=kind)
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    for t in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and a["slow"], (t, a)
        assert (a["layer"], a["component"]) == (f.layer, f.component), a
        assert a["rules"]["cause"] == CAUSE_RULES[kind], (t.step, a["rules"])
        device = [e for e in a["evidence"] if e.get("kind") != "timing"]
        assert {e["metric"] for e in device} & why, a["evidence"]
        start = sc.t0 + float(sc.timeline.start[t.step].min())
        for e in device:
            if e.get("kind") == "event":  # an XID: the code as logged, on the faulty GPU
                got = db_conn.execute("SELECT attrs->>'code' FROM events WHERE kind = 'gpu_xid' AND source = %s",
                                      (e["source"],)).fetchall()
                assert e["source"] == f.component and [(e["labels"]["code"],)] == got, e
                continue
            lo, hi = _stored(db_conn, e, start - 60, start + 15)
            # the value the row reports was stored, on the faulty side of its baseline
            assert lo - 1e-6 <= e["value"] <= hi + 1e-6 and e["value"] != e["baseline"], e
    healthy = [t.step for t in sc.truth.values() if t.slow is False and t.step > 8]
    for s in healthy:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=s)
        assert a is not None and not a["slow"] and a["rules"]["verdict"] == ids.VERDICT_UNDER_BAR, a


def test_a_throttled_gpu_reports_clock_and_flag_against_its_references(service_url: str,
                                                                        db_conn: psycopg.Connection) -> None:
    rng = np.random.default_rng(3)
    f = make_fault(build_cluster(SPEC), "gpu_thermal_throttle", start_step=18, steps=4, severity=0.4,
                   variant="sw_thermal", rng=rng)
    sc = _send(service_url, [f], seed=9, name="throttle")
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=19)
    assert a is not None and (a["layer"], a["component"]) == ("compute", f.component)
    assert a["rules"]["cause"] == ids.CAUSE_STRAGGLER and ids.ADJUST_DEVICE_EVIDENCE in a["rules"]["adjust"], a["rules"]
    by = {e["metric"]: e for e in a["evidence"]}
    assert by["gpu_throttle_active"]["labels"] == {"reason": "sw_thermal"} and by["gpu_throttle_active"]["value"] == 1
    clock = by["gpu_sm_clock_hz"]
    assert clock["value"] < 0.9 * clock["baseline"] and clock["unit"] == "value"
    assert a["evidence"][0]["kind"] == "timing"  # the timings say who, the telemetry says why


def test_tcp_retransmits_name_the_hosts_only_nic(service_url: str, db_conn: psycopg.Connection) -> None:
    """With one NIC per host the lost segments can only have gone through it: the NIC is named."""
    spec = ClusterSpec(hosts=4, gpus_per_host=2, nics_per_host=1, leaves=2, spines=2)
    f = make_fault(build_cluster(spec), "tcp_retransmits", start_step=20, steps=3, severity=0.3,
                   rng=np.random.default_rng(1))
    assert f.component.endswith(":mlx5_0")
    sc = _send(service_url, [f], seed=4, name="tcp1", spec=spec)
    for t in (t for t in sc.truth.values() if t.slow):
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and (a["layer"], a["component"]) == ("nic", f.component), a
        assert a["evidence"][0]["source"] == f.component.split(":")[0]
        assert a["evidence"][0]["metric"] == "tcp_retransmitted_segments_total"
        assert a["rules"]["cause"] == ids.CAUSE_NETWORK_SIGNAL, a["rules"]


def test_a_downtrained_gpu_that_only_slows_the_ring_is_named_from_its_telemetry(
        service_url: str, db_conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """No straggler in the timings (all of its delay is in its hop of the ring) and no network
    counter moves: only the GPU's own PCIe link width says which GPU the ring waited for."""
    from fabricscope.service.simulate import model

    monkeypatch.setattr(model, "PCIE_COMPUTE_SHARE", 0.0)
    f = make_fault(build_cluster(SPEC), "pcie_downtrain", start_step=20, steps=3, severity=0.3, variant="width",
                   rng=np.random.default_rng(2))
    sc = _send(service_url, [f], seed=6, name="ring")
    slow = [t for t in sc.truth.values() if t.slow]
    assert slow
    for t in slow:
        a = ENGINE.attribute_step(db_conn, job=sc.job, step=t.step)
        assert a is not None and (a["layer"], a["component"]) == ("compute", f.component), a
        assert not [e for e in a["evidence"] if e.get("kind") == "timing"]  # the timings did not say who
        assert a["rules"]["cause"] == ids.CAUSE_RING_GPU, a["rules"]  # the scan of the ring's GPUs named it
        assert a["evidence"][0]["metric"] == "pcie_link_width" and a["evidence"][0]["value"] < 16


def test_retransmits_in_the_step_outweigh_a_link_that_flapped_before_it(service_url: str,
                                                                        db_conn: psycopg.Connection,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A link flapped until a few seconds before the step (its link-down look-back still reaches the
    step) and a host's TCP retransmissions rise during the step: what moved in the step is named."""
    from fabricscope.service.correlate import localize

    cl = build_cluster(SPEC)
    flap = make_fault(cl, "link_flap", start_step=14, steps=3, severity=0.3, variant="uplink",
                      rng=np.random.default_rng(5))
    tcp = make_fault(cl, "tcp_retransmits", start_step=19, steps=2, severity=0.3, rng=np.random.default_rng(6))
    sc = _send(service_url, [flap, tcp], seed=7, name="after-flap")
    gap = sc.timeline.start[19].min() - sc.timeline.end[16].max()
    assert gap < 10.0  # within the link-down look-back (AFTERMATH_S)
    a = ENGINE.attribute_step(db_conn, job=sc.job, step=19)
    assert a is not None and (a["layer"], a["component"]) == ("nic", tcp.component), a
    assert a["rules"]["cause"] == ids.CAUSE_NETWORK_SIGNAL, a["rules"]
    # weighing the look-back like in-window evidence, the flapped link would have been named
    monkeypatch.setattr(localize, "AFTERMATH_WEIGHT", 1.0)
    b = AttributionEngine().attribute_step(db_conn, job=sc.job, step=19, store=False)
    assert b is not None and (b["layer"], b["component"]) == ("link", flap.component), b
