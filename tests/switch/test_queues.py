"""Queues, ECN, PFC and PFC-watchdog signals from gNMI (SONiC COUNTERS_DB, openconfig-qos) and NETCONF
(Junos native), each checked against the recorded reply it comes from."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from fabricscope.collectors.switch.gnmi.client import GnmiCollector
from fabricscope.collectors.switch.gnmi.parse import parse as gnmi_parse
from fabricscope.collectors.switch.netconf import models
from fabricscope.collectors.switch.netconf.parse import parse as netconf_parse
from tests.switch.fixture_io import FIXTURES, TS, read_gnmi, run_case
from tests.switch.gnmi_server import ReplayTarget, serve
from tests.switch.test_gnmi_wire import _device

SONIC = FIXTURES / "gnmi" / "sonic-countersdb-queues-pfc"
JUNOS = FIXTURES / "netconf" / "junos-qfx-interfaces-extensive"
ROOT = Path(__file__).resolve().parents[2]


def _raw(name: str) -> dict:
    return json.loads((SONIC / "raw" / name).read_text())


def _values(samples, source, metric, labels=None, ts=None):  # type: ignore[no-untyped-def]
    return [s["value"] for s in samples if s["source"] == source and s["metric"] == metric
            and s.get("labels") == labels and (ts is None or s["ts"] == ts)]  # fmt: skip


def test_sonic_queue_oid_is_named_through_the_queue_name_map():
    msgs = [m.update for m in read_gnmi(SONIC / "responses.json")]
    raw_queue = _raw("COUNTERS+oid+0x1500000000091c.txt")
    assert _raw("COUNTERS_QUEUE_NAME_MAP.txt")["Ethernet68:1"] == "oid:0x1500000000091c"
    named = [s.to_json() for s in gnmi_parse("sw1", msgs[:3]).samples]
    assert _values(named, "sw1:Ethernet68", "queue_watermark_bytes", {"queue": "1"}) == [
        float(raw_queue["SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"])]
    # the same queue object without the maps: nothing is guessed, the object is reported
    alone = gnmi_parse("sw1", msgs[2:3])
    assert alone.samples == [] and any("oid:0x1500000000091c" in p for p in alone.problems)


def test_sonic_names_persist_across_notifications_of_one_stream():
    msgs = [m.update for m in read_gnmi(SONIC / "responses.json")]
    names: dict[str, str] = {}
    gnmi_parse("sw1", msgs[:2], names=names)  # the maps arrive first, the counters later
    later = gnmi_parse("sw1", msgs[2:3], names=names)
    assert {s.labels["queue"] for s in later.samples if s.labels} == {"1"}


def test_sonic_periodic_watermark_wins_over_the_counters_copy():
    got = run_case("gnmi", SONIC)["samples"]
    queues = _raw("COUNTERS+Ethernet68+Queues.txt")
    periodic = float(queues["Ethernet68:1:periodic"]["SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"])
    assert float(queues["Ethernet68:1"]["SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"]) != periodic
    ts = next(s["ts"] for s in got if s["metric"] == "pfc_deadlock_total")  # the Queues notification
    assert _values(got, "sw1:Ethernet68", "queue_watermark_bytes", {"queue": "1"}, ts) == [periodic]


def test_sonic_pfc_per_priority_and_watchdog_and_pg_watermarks():
    got = run_case("gnmi", SONIC)["samples"]
    port = _raw("COUNTERS+Ethernet68.txt")
    for prio in range(8):
        for way, metric in (("RX", "rx_pause_frames_total"), ("TX", "tx_pause_frames_total")):
            want = float(port[f"SAI_PORT_STAT_PFC_{prio}_{way}_PKTS"])
            assert want in _values(got, "sw1:Ethernet68", metric, {"priority": str(prio)})
    wild = _raw("COUNTERS+Ethernet_wildcard_PFC_7_RX.txt")
    assert _values(got, "sw1:Ethernet1", "rx_pause_frames_total", {"priority": "7"}) == [
        float(wild["Ethernet1"]["SAI_PORT_STAT_PFC_7_RX_PKTS"])]
    pfcwd = _raw("COUNTERS+Ethernet68+Pfcwd.txt")
    for q in ("3", "4"):
        want = float(pfcwd[f"Ethernet68:{q}"]["PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED"])
        assert want in _values(got, "sw1:Ethernet68", "pfc_deadlock_total", {"queue": q})
    pg = {tuple(sorted(s["labels"].items())) for s in got if s["source"] == "sw1:Ethernet16"}
    assert pg == {(("buffer", "shared"), ("priority_group", "5")), (("buffer", "headroom"), ("priority_group", "5"))}


def test_junos_extensive_queues_and_pfc_follow_the_recording():
    import xml.etree.ElementTree as ET

    raw = ET.parse(JUNOS / "reply.xml").getroot()
    itf = next(p for p in raw.iterfind(".//{*}physical-interface") if p.findtext("{*}name") == "et-0/0/24")
    got = [s.to_json() for s in netconf_parse("sw1", (JUNOS / "reply.xml").read_bytes(), models.JUNOS, TS).samples]
    for q in itf.iterfind("{*}queue-counters/{*}queue"):
        labels = {"queue": q.findtext("{*}queue-number")}
        assert _values(got, "sw1:et-0/0/24", "tx_queue_packets_total", labels) == [
            float(q.findtext("{*}queue-counters-trans-packets"))]
        assert _values(got, "sw1:et-0/0/24", "queue_dropped_packets_total", labels) == [
            float(q.findtext("{*}queue-counters-total-drop-packets"))]
    assert {s["labels"]["priority"] for s in got if s["metric"] == "rx_pause_frames_total" and s.get("labels")} == {
        str(p) for p in range(8)}
    assert _values(got, "sw1:et-0/0/24", "speed_bps") == [40e9]  # "40Gbps"
    assert _values(got, "sw1:et-0/0/24", "tx_bytes_total") == [32313870891611.0]


def test_junos_model_is_chosen_by_capability_and_openconfig_qos_is_an_extra():
    junos_caps = ["urn:ietf:params:netconf:base:1.0", "http://xml.juniper.net/netconf/junos/1.0"]
    assert models.choose(junos_caps) is models.JUNOS and models.extras(junos_caps) == []
    oc_caps = ["http://openconfig.net/yang/interfaces?module=openconfig-interfaces",
               "http://openconfig.net/yang/qos?module=openconfig-qos", *junos_caps]  # fmt: skip
    assert models.choose(oc_caps) is models.OPENCONFIG and models.extras(oc_caps) == [models.OPENCONFIG_QOS]


def _parse_cli(path: Path) -> tuple[list[dict], dict]:
    r = subprocess.run([sys.executable, "-m", "fabricscope", "parse", "-d", "sw1", str(path)],
                       capture_output=True, text=True, cwd=ROOT, check=True)  # fmt: skip
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    summary = json.loads(r.stderr.strip().splitlines()[-1].partition(" ")[2])
    return lines, summary


def test_fabricscope_parse_sniffs_gnmi_json_and_netconf_reply():
    lines, summary = _parse_cli(SONIC / "responses.json")
    assert summary["format"] == "gnmi-json" and summary["problems"] == []
    # seen, not mapped: said so, with how often it came
    assert any(u.startswith("SAI_QUEUE_STAT_DROPPED_BYTES (") for u in summary["unmapped"])
    expected = json.loads((SONIC / "expected.json").read_text())["samples"]
    assert [{k: v for k, v in line.items() if k != "kind"} for line in lines if line["kind"] == "sample"] == expected
    lines, summary = _parse_cli(JUNOS / "reply.xml")
    assert summary["format"] == "netconf-reply" and summary["samples"] == len(run_case("netconf", JUNOS)["samples"])


async def _collect(target: ReplayTarget):  # type: ignore[no-untyped-def]
    server, port = await serve(target)
    try:
        return await GnmiCollector(_device(port, encoding="json_ietf")).poll()
    finally:
        await server.stop(None)


def test_sonic_target_gets_a_counters_db_subscription_and_its_samples_arrive():
    sonic = read_gnmi(SONIC / "responses.json")
    oc = read_gnmi(FIXTURES / "gnmi" / "sonic-ethernet35-oc-counters" / "responses.json")
    target = ReplayTarget(oc, models=("openconfig-interfaces", "openconfig-qos", "sonic-db"),
                          by_target={"COUNTERS_DB": sonic})  # fmt: skip
    result = asyncio.run(_collect(target))
    prefixes = sorted(r.subscribe.prefix.target for r in target.requests)
    assert prefixes == ["", "COUNTERS_DB"]
    oc_req = next(r for r in target.requests if not r.subscribe.prefix.target).subscribe
    assert "qos/interfaces/interface/output/queues/queue/state" in {
        "/".join(e.name for e in s.path.elem) for s in oc_req.subscription}
    db_req = next(r for r in target.requests if r.subscribe.prefix.target).subscribe
    assert {"/".join(e.name for e in s.path.elem) for s in db_req.subscription} >= {"COUNTERS/Ethernet*/Queues"}
    got = [s.to_json() for s in result.samples]
    expected = [{**s, "source": s["source"].replace("sw1:", "spine1:")}
                for s in json.loads((SONIC / "expected.json").read_text())["samples"]]  # fmt: skip
    assert [s for s in got if s.get("labels")] == [s for s in expected if s.get("labels")]
    assert any(s["source"] == "spine1:Ethernet35" for s in got)  # the OpenConfig stream too


def test_a_target_without_the_models_gets_the_interface_subscription_only():
    target = ReplayTarget(read_gnmi(FIXTURES / "gnmi" / "ciena-oc-if-counters" / "responses.json"))
    asyncio.run(_collect(target))
    assert len(target.requests) == 1
    paths = {"/".join(e.name for e in s.path.elem) for s in target.requests[0].subscribe.subscription}
    assert not any(p.startswith("qos") for p in paths)
