"""Every recorded real reply under tests/fixtures/{snmp,lldp,netconf,gnmi}/<case>/ parses to exactly
its expected.json; plus spot checks tying expected values back to the raw recording."""

from __future__ import annotations

import json

import pytest

from tests.switch.fixture_io import FIXTURES, cases, read_snmprec, run_case


@pytest.mark.parametrize(("kind", "case"), cases(), ids=lambda v: getattr(v, "name", v))
def test_case_matches_expected(kind, case):
    expected = json.loads((case / "expected.json").read_text())
    assert run_case(kind, case) == expected


def _sample(result, source, metric, labels=None):
    hits = [s for s in result["samples"] if s["source"] == source and s["metric"] == metric
            and s.get("labels") == labels]  # fmt: skip
    assert len(hits) == 1, (source, metric, hits)
    return hits[0]["value"]


def test_snmp_hc_counters_and_fallbacks_follow_the_recording():
    case = FIXTURES / "snmp" / "cisco-n5000"
    raw = dict(read_snmprec(case / "input.snmprec"))
    got = run_case("snmp", case)
    idx = 436207616  # Ethernet1/1
    assert raw[f"1.3.6.1.2.1.31.1.1.1.1.{idx}"] == b"Ethernet1/1"
    src = "sw1:Ethernet1/1"
    assert _sample(got, src, "rx_bytes_total") == raw[f"1.3.6.1.2.1.31.1.1.1.6.{idx}"]  # HC wins
    assert _sample(got, src, "rx_packets_total") == sum(raw[f"1.3.6.1.2.1.31.1.1.1.{c}.{idx}"] for c in (7, 8, 9))
    assert _sample(got, src, "speed_bps") == raw[f"1.3.6.1.2.1.31.1.1.1.15.{idx}"] * 1e6
    assert _sample(got, src, "rx_pause_frames_total") == raw[f"1.3.6.1.2.1.10.7.10.1.3.{idx}"]
    assert _sample(got, src, "oper_up") == (1.0 if raw[f"1.3.6.1.2.1.2.2.1.8.{idx}"] == 1 else 0.0)


def test_snmp_malformed_varbind_is_reported_and_the_rest_kept():
    got = run_case("snmp", FIXTURES / "snmp" / "arista-dcs-7150s-52-cl")
    # the Arista recording repeats ieee8021PfcIndications.999001 as an empty OCTET STRING
    assert any("1.3.111.2.802.1.1.21.1.1.1.3.999001" in p for p in got["problems"])
    assert _sample(got, "sw1:Ethernet2", "rx_bytes_total") == 2993597393618
    assert _sample(got, "sw1:Management1", "rx_pause_frames_total", {"priority": "all"}) == 0


def test_netconf_ietf_sums_packet_parts_and_drops_the_unknown_speed_sentinel():
    got = run_case("netconf", FIXTURES / "netconf" / "netconfd-ietf-interfaces-state")
    assert _sample(got, "sw1:lo", "rx_packets_total") == 989 + 0  # unicast + multicast
    assert not [s for s in got["samples"] if s["metric"] == "speed_bps"]  # 2**64-1e6 = unknown


def test_gnmi_interface_name_from_leaf_and_last_clear_epoch():
    got = run_case("gnmi", FIXTURES / "gnmi" / "ciena-oc-if-counters")
    assert _sample(got, "sw1:1", "rx_bytes_total") == 95890972327359
    assert got["epochs"] == {"sw1:1": "1679547185677412529"}


def test_lldp_links_name_both_ends():
    got = run_case("lldp", FIXTURES / "lldp" / "arista-dcs-7150s-52-cl")
    assert {"a": "sw1:Ethernet47", "b": "ZJ-BP-Bak-Arista:Ethernet23", "speed_bps": 10e9} in got["links"]
    jun = run_case("lldp", FIXTURES / "lldp" / "juniper-mx960")
    assert all(not link["a"].split(":", 1)[1].isdigit() for link in jun["links"])  # ifIndex → ifName
