"""Walk plans on recorded real switch walks: a planned poll (fallbacks the device covers and columns it
never answers left out) must give exactly the samples and links of a full poll, and the plan must
go back to a full walk whenever the device may have changed shape."""

from __future__ import annotations

import pytest

from fabricscope.collectors.switch.snmp import lldp as snmp_lldp
from fabricscope.collectors.switch.snmp import oids
from fabricscope.collectors.switch.snmp.parse import parse
from fabricscope.collectors.switch.snmp.plan import WalkPlan
from tests.switch.fixture_io import FIXTURES, TS, case_meta, read_snmprec

CASES = sorted(p for kind in ("snmp", "lldp") for p in (FIXTURES / kind).iterdir() if p.is_dir())
EXTRA = [oids.IF_NAME, oids.IF_DESCR, oids.IF_COUNTER_DISCONTINUITY, *oids.LLDP_COLUMNS]


def walk(recording, columns):
    """What a GETBULK walk of ``columns`` returns from the recording (plus sysUpTime)."""
    prefixes = tuple(c + "." for c in columns)
    return [(o, v) for o, v in recording if o == oids.SYS_UPTIME or o.startswith(prefixes)]


def poll(plan: WalkPlan, recording, restarted=False):
    cols, full = plan.next_walk()
    vbs = walk(recording, cols)
    p = parse("sw1", vbs, TS, plan.columns)
    plan.observe(vbs, full, restarted, frozenset(p.if_names))
    links = snmp_lldp.links_from_snmp("sw1", vbs, None, p.if_names)
    return p, links, cols


def result(p, links):
    return [s.to_json() for s in p.samples], sorted(p.problems), [link.to_json() for link in links]


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_planned_poll_equals_full_poll_on_recorded_walks(case):
    recording = read_snmprec(case / "input.snmprec")
    plan = WalkPlan(oids.columns_for(case_meta(case).get("vendor")), EXTRA)
    full, full_links, cols = poll(plan, recording)
    assert set(cols) == set(plan.all)
    planned, planned_links, cols = poll(plan, recording)
    assert len(cols) < len(plan.all)  # every recorded switch lacks some table we ask for
    assert result(planned, planned_links) == result(full, full_links)


def test_arista_drops_32bit_fallbacks_and_absent_tables_but_keeps_what_it_needs():
    recording = read_snmprec(FIXTURES / "snmp" / "arista-dcs-7150s-52-cl" / "input.snmprec")
    plan = WalkPlan(oids.columns_for("arista"), EXTRA)
    poll(plan, recording)
    assert "1.3.6.1.2.1.2.2.1.10" in plan.skipped  # ifInOctets: every row has ifHCInOctets
    assert "1.3.6.1.2.1.2.2.1.5" in plan.skipped  # ifSpeed: ifHighSpeed everywhere
    assert "1.3.6.1.2.1.31.1.1.1.6" not in plan.skipped and oids.IF_NAME not in plan.skipped
    assert "1.3.6.1.2.1.2.2.1.13" not in plan.skipped  # ifInDiscards has no better column


def test_fallback_kept_for_an_interface_without_hc_counters():
    recording = read_snmprec(FIXTURES / "snmp" / "arista-dcs-7150s-52-cl" / "input.snmprec")
    hc_in = "1.3.6.1.2.1.31.1.1.1.6."
    victim = next(o for o, _ in recording if o.startswith(hc_in))
    trimmed = [(o, v) for o, v in recording if o != victim]  # one port with only ifInOctets
    plan = WalkPlan(oids.columns_for(None), EXTRA)
    full = result(*poll(plan, trimmed)[:2])
    assert "1.3.6.1.2.1.2.2.1.10" not in plan.skipped
    assert "1.3.6.1.2.1.2.2.1.16" in plan.skipped  # ifOutOctets still fully covered
    assert result(*poll(plan, trimmed)[:2]) == full


def test_back_to_a_full_walk_on_reprobe_new_interface_or_restart():
    recording = read_snmprec(FIXTURES / "snmp" / "arista-dcs-7150s-52-cl" / "input.snmprec")
    plan = WalkPlan(oids.columns_for(None), EXTRA, reprobe_every=4)
    fulls = [len(poll(plan, recording)[2]) == len(plan.all) for _ in range(9)]
    assert fulls == [True, False, False, False, True, False, False, False, True]
    # an interface disappears (module pulled): the next poll is full again
    gone = next(o for o, _ in recording if o.startswith(oids.IF_NAME + ".")).rpartition(".")[2]
    fewer = [(o, v) for o, v in recording if o.rpartition(".")[2] != gone]
    assert len(poll(plan, fewer)[2]) < len(plan.all)
    assert plan.full_due
    poll(plan, fewer)
    assert not plan.full_due
    poll(plan, fewer, restarted=True)  # agent restart seen on a planned poll
    assert plan.full_due


def test_without_pruning_every_poll_is_full():
    recording = read_snmprec(FIXTURES / "snmp" / "cisco-n5000" / "input.snmprec")
    plan = WalkPlan(oids.columns_for("cisco"), EXTRA, reprobe_every=1)
    assert all(len(poll(plan, recording)[2]) == len(plan.all) for _ in range(3))


def test_lldp_columns_are_walked_even_when_empty_at_the_full_walk() -> None:
    """A neighbour cabled after the full walk must be discovered on the next poll, not 30 polls later."""
    from fabricscope.collectors.switch.snmp import oids
    from fabricscope.collectors.switch.snmp.plan import WalkPlan

    plan = WalkPlan(oids.columns_for(None), [oids.IF_NAME, *oids.LLDP_COLUMNS], always=oids.LLDP_COLUMNS)
    walk, full = plan.next_walk()
    assert full
    plan.observe([], full=True)  # nothing answered: every column would be planned out
    walk, full = plan.next_walk()
    assert not full
    assert set(oids.LLDP_COLUMNS) <= set(walk)
    assert oids.IF_NAME not in walk


def test_ifspeed_stays_in_the_poll_where_ifhighspeed_disagrees_with_it() -> None:
    """i43t: parse keeps ifSpeed where a device's ifHighSpeed disagrees with it (a SCALANCE puts b/s there);
    a planned poll that left ifSpeed out would report its 10 Mb/s ports at 10 Tb/s between full walks."""
    from fabricscope.collectors.switch.snmp.formats import read_snmpwalk

    fixtures = FIXTURES / "snmp-walk"
    for case, kept in (("siemens-scalance-x204irt-pnet-docs", True), ("netsnmp-linux-snmpbulkwalk-On", False)):
        varbinds, _ = read_snmpwalk((fixtures / case / "walk.txt").read_text())
        plan = WalkPlan(oids.STANDARD)
        plan.observe(varbinds, full=True, if_indexes=frozenset(parse("sw", varbinds, 1.0).if_names))
        assert ("1.3.6.1.2.1.2.2.1.5" not in plan.skipped) is kept, case
        planned = [vb for vb in varbinds if vb[0].rpartition(".")[0] not in plan.skipped]
        full = {(s.source, s.metric): s.value for s in parse("sw", varbinds, 1.0).samples}
        assert {(s.source, s.metric): s.value for s in parse("sw", planned, 1.0).samples} == full, case
