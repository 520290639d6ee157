"""Vendor queue/CoS MIB tables (JUNIPER-COS-MIB jnxCosQstatTable) on real recorded MX960 walks:
the ifIndex.queue index becomes the ``queue`` label, drops are tail + RED where the device lacks the
total column, depth columns become gauges, and the walk plan drops the columns a device lacks."""

from __future__ import annotations

from fabricscope.collectors.switch.snmp import oids
from fabricscope.collectors.switch.snmp.parse import parse
from fabricscope.collectors.switch.snmp.plan import WalkPlan
from tests.switch.fixture_io import FIXTURES, TS, read_snmprec

JNX = "1.3.6.1.4.1.2636.3.15.4.1."
DROPS_CASE = FIXTURES / "snmp" / "juniper-mx960-12-cos-drops"
DEPTH_CASE = FIXTURES / "snmp" / "juniper-mx960-cos"


def _value(samples, source, metric, queue):
    hits = [s.value for s in samples if (s.source, s.metric) == (source, metric) and s.labels == {"queue": queue}]
    assert len(hits) == 1, (source, metric, queue, hits)
    return hits[0]


def test_queue_drops_are_tail_plus_red_drops_per_queue():
    raw = dict(read_snmprec(DROPS_CASE / "input.snmprec"))
    got = parse("mx1", raw.items(), TS, oids.columns_for("juniper"))
    assert not got.problems
    # ifIndex 586 is xe-0/2/1; queue 3 has both kinds of drop in the recording (3308 tail, 1 RED)
    assert raw["1.3.6.1.2.1.31.1.1.1.1.586"] == b"xe-0/2/1"
    for q in range(8):
        want = raw[f"{JNX}11.586.{q}"] + raw[f"{JNX}13.586.{q}"]
        assert _value(got.samples, "mx1:xe-0/2/1", "queue_dropped_packets_total", str(q)) == want
    assert _value(got.samples, "mx1:xe-0/2/1", "queue_dropped_packets_total", "3") == 3309
    assert _value(got.samples, "mx1:xe-0/2/1", "tx_queue_bytes_total", "0") == raw[f"{JNX}9.586.0"]
    # Junos 12.3 has no depth columns: absent, not zero
    assert not [s for s in got.samples if s.metric == "queue_occupancy_bytes"]


def test_queue_depth_and_peak_are_gauges_of_each_queue():
    raw = dict(read_snmprec(DEPTH_CASE / "input.snmprec"))
    got = parse("mx1", raw.items(), TS, oids.columns_for("juniper"))
    assert _value(got.samples, "mx1:ge-0/0/1", "queue_watermark_bytes", "0") == raw[f"{JNX}59.543.0"] == 9516
    assert _value(got.samples, "mx1:xe-1/2/0", "queue_occupancy_bytes", "3") == raw[f"{JNX}58.760.3"]
    queues = {s.labels["queue"] for s in got.samples if s.metric == "tx_queue_packets_total"}
    assert queues == {str(q) for q in range(8)}


def test_queue_tables_only_for_the_vendor_hinted():
    raw = read_snmprec(DEPTH_CASE / "input.snmprec")
    plain = parse("mx1", raw, TS, oids.columns_for(None))
    assert not [s for s in plain.samples if s.labels and "queue" in s.labels]
    assert oids.vendor_in(oid for oid, _ in raw) == "juniper"


def test_plan_keeps_tail_and_red_columns_when_total_drops_are_missing():
    """Junos 12.3 answers neither TotalDropPkts (53) nor the depth columns: planned polls leave
    those out, but must keep the tail/RED fallback pair that is the only drop source."""
    raw = read_snmprec(DROPS_CASE / "input.snmprec")
    cols = oids.columns_for("juniper")
    plan = WalkPlan(cols, [oids.IF_NAME, oids.IF_DESCR])
    walk, full = plan.next_walk()
    assert full
    shown = [(o, v) for o, v in raw if any(o.startswith(c + ".") for c in walk)]
    plan.observe(shown, True, if_indexes=frozenset({586}))
    walk, full = plan.next_walk()
    assert not full
    assert f"{JNX}53" not in walk and f"{JNX}58" not in walk and f"{JNX}59" not in walk
    assert f"{JNX}11" in walk and f"{JNX}13" in walk and f"{JNX}7" in walk
    planned = parse("mx1", [(o, v) for o, v in raw if any(o.startswith(c + ".") for c in walk)], TS, cols)
    full_poll = parse("mx1", raw, TS, cols)
    assert {(s.source, s.metric, tuple(sorted((s.labels or {}).items())), s.value) for s in planned.samples} == \
        {(s.source, s.metric, tuple(sorted((s.labels or {}).items())), s.value) for s in full_poll.samples}


# --- Cisco Catalyst: CISCO-PORT-QOS-MIB cportQosEgressQueueStatsTable (recorded 3750, IOS 12.2) ---

CPORT = "1.3.6.1.4.1.9.9.189.1.3.5.1."
CATALYST_CASE = FIXTURES / "snmp" / "cisco-c3750-egress-queues"


def test_catalyst_queue_counters_are_summed_over_drop_thresholds():
    raw = dict(read_snmprec(CATALYST_CASE / "input.snmprec"))
    got = parse("c3750", raw.items(), TS, oids.columns_for("cisco"))
    assert not got.problems
    assert raw["1.3.6.1.2.1.31.1.1.1.1.10109"] == b"Gi1/0/9"
    for q in range(1, 5):  # IOS numbers the queues 1..4: the label keeps the device's numbering
        for metric, col in (("tx_queue_packets_total", "3"), ("queue_dropped_packets_total", "4")):
            want = sum(raw[f"{CPORT}{col}.10109.{q}.{t}"] for t in (1, 2, 3))
            assert _value(got.samples, "c3750:Gi1/0/9", metric, str(q)) == want
    assert _value(got.samples, "c3750:Gi1/0/9", "tx_queue_packets_total", "2") == 2159210421
    assert _value(got.samples, "c3750:Gi1/0/9", "queue_dropped_packets_total", "4") == 595304
    assert _value(got.samples, "c3750:Gi1/0/12", "queue_dropped_packets_total", "2") == 149
    assert {s.labels["queue"] for s in got.samples if s.labels and "queue" in s.labels} == {"1", "2", "3", "4"}


def test_catalyst_walk_is_recognised_as_cisco_and_its_plan_keeps_the_queue_table():
    raw = read_snmprec(CATALYST_CASE / "input.snmprec")
    assert oids.vendor_in(oid for oid, _ in raw) == "cisco"
    plan = WalkPlan(oids.columns_for("cisco"), [oids.IF_NAME, oids.IF_DESCR])
    walk, _ = plan.next_walk()
    plan.observe([(o, v) for o, v in raw if any(o.startswith(c + ".") for c in walk)], True,
                 if_indexes=frozenset({10109, 10112}))
    walk, full = plan.next_walk()
    assert not full
    assert f"{CPORT}3" in walk and f"{CPORT}4" in walk
    assert not [c for c in oids.CISCO_PFC if c.oid in walk]  # a 3750 has no PFC table: planned out


def test_fabricscope_parse_reads_the_catalyst_walk():
    from tests.switch.test_parse_formats import parse_cli

    summary, rows = parse_cli(CATALYST_CASE / "input.snmprec")
    assert summary["format"] == "snmprec" and summary["problems"] == []
    drops = {r["labels"]["queue"]: r["value"] for r in rows
             if r["source"] == "sw1:Gi1/0/12" and r["metric"] == "queue_dropped_packets_total"}
    assert drops == {"1": 0, "2": 149, "3": 0, "4": 129787}
