"""#43, network and training formats: one test per class of misread the independent check found.
Each fails on the code before the fix (zero rows with exit 0, a refused file, an empty ``unmapped``,
a cable put on the wrong switch) and passes now."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.collectors.switch.gnmi.parse import parse as gnmi_parse
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.collectors.switch.infiniband.topology import parse_ibnetdiscover
from fabricscope.collectors.training.importers import nccl_inspector
from fabricscope.collectors.training.importers.nccl_tests import parse as nccl_parse
from tests.training.test_nccl_tests import _derived_json

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
RCCL = FIXTURES / "nccl-tests" / "rccl-mi300x-1node-8rank" / "output.txt"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabricscope", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False)  # fmt: skip


def _summary(stderr: str) -> dict:
    return json.loads(next(ln for ln in stderr.splitlines() if ln.startswith("summary ")).removeprefix("summary "))


# ---- nccl-tests / rccl-tests ----

def _with_extra_columns(text: str, where: str) -> str:
    """rccl-tests output as a version that prints algorithm, protocol and channel columns would."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip("#").split()
        if body[:2] == ["size", "count"]:
            extra = "  algorithm  protocol  channels"
            line = line.replace("  root", "  root  algo") if where == "lead" else line + extra
        elif line.strip()[:1].isdigit() and len(line.split()) == 13:
            parts = line.split()
            line = ("  ".join([*parts[:5], "RING", *parts[5:]]) if where == "lead"
                    else line + "  RING  SIMPLE  16")
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("where", ["tail", "lead"])
def test_rccl_extra_columns_are_named_and_every_row_kept(tmp_path: Path, where: str) -> None:
    plain = nccl_parse(RCCL.read_text(), source="all_reduce_perf.log")[0]
    (run,) = nccl_parse(_with_extra_columns(RCCL.read_text(), where), source="all_reduce_perf.log")
    assert run["rows"] == plain["rows"] and len(run["rows"]) == 62
    named = [p for p in run["problems"] if "columns not read" in p]
    assert len(named) == 1 and ("algorithm, protocol, channels" in named[0] or "algo" in named[0])
    f = tmp_path / "all_reduce_perf.log"
    f.write_text(_with_extra_columns(RCCL.read_text(), where))
    assert _cli("import", "nccl-tests", "--fabric", "f1", "--dry-run", str(f)).returncode == 0


def test_import_exits_non_zero_when_no_row_comes_out(tmp_path: Path) -> None:
    f = tmp_path / "all_reduce_perf.log"
    # a row that fits no column layout: nothing can be placed, and the import says so
    f.write_text(RCCL.read_text().replace("19.28    0.00    0.00      0    17.24", "19.28 x y z w v u t"))
    text = "\n".join(ln for ln in f.read_text().split("\n") if not ln.strip()[:1].isdigit() or "19.28" in ln)
    f.write_text(text)
    proc = _cli("import", "nccl-tests", "--fabric", "f1", "--dry-run", str(f))
    assert proc.returncode == 1 and "would not be sent: no result rows" in proc.stderr


@pytest.mark.parametrize(("prefix", "ranks"), [
    ("$ mpirun -np 2 --host a,b ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 4\n", 8),
    ("h1:123:123 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 - Init COMPLETE\n", 16),
])
def test_a_table_only_paste_takes_ranks_from_what_the_header_states(prefix: str, ranks: int) -> None:
    table = "\n".join(ln for ln in RCCL.read_text().split("\n") if "Rank" not in ln and "nThread" not in ln
                      and "mpirun" not in ln)  # fmt: skip
    (run,) = nccl_parse(prefix + table, source="all_reduce_perf.log")
    assert run["ranks"] == ranks and len(run["rows"]) == 62
    assert any("ranks taken from" in p for p in run["problems"])  # said where it came from


def test_nccl_tests_and_inspector_are_parse_formats(tmp_path: Path) -> None:
    listed = _cli("parse", "--list").stdout
    for name in ("nccl-tests", "nccl-tests-json", "nccl-inspector"):
        assert re.search(rf"^{name}\s", listed, re.MULTILINE), name
    proc = _cli("parse", "-d", "mi300x", str(RCCL))
    assert proc.returncode == 0 and _summary(proc.stderr)["format"] == "nccl-tests"
    lines = [json.loads(ln) for ln in proc.stdout.splitlines()]
    busbw = [ln["value"] for ln in lines if ln["metric"] == "nccl_test_busbw_gbps"]
    assert len(busbw) == 62 and max(busbw) > 0
    j = tmp_path / "run.json"
    j.write_text(_derived_json())
    proc = _cli("parse", "-d", "h", str(j))
    assert proc.returncode == 0 and _summary(proc.stderr)["format"] == "nccl-tests-json"


# ---- NCCL Inspector ----

_HEADER = {"id": "0x7f8c496ae9f661", "comm_name": "PP Group 1", "rank": 2, "n_ranks": 8, "nnodes": 1}
_META = {"inspector_output_format_version": "v4.2", "dump_timestamp_us": 1748030377748202,
         "hostname": "node3", "pid": 1639453}
_COLL = {"coll": "AllReduce", "coll_algo": "RING", "coll_proto": "LL", "coll_sn": 1407,
         "coll_msg_size_bytes": 17179869184, "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
         "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}
_P2P = {"p2p": "Send", "p2p_sn": 8, "p2p_peer": 3, "p2p_msg_size_bytes": 524288, "p2p_exec_time_us": 50,
        "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 30.0, "p2p_busbw_gbs": 30.0}


def test_inspector_reads_p2p_records_and_keeps_communicator_algorithm_protocol() -> None:
    text = "\n".join(json.dumps(o) for o in (
        {"header": _HEADER, "metadata": _META, "coll_perf": _COLL},
        {"header": _HEADER, "metadata": _META, "p2p_perf": _P2P},
        {"header": _HEADER, "metadata": _META, "p2p_perf": {**_P2P, "p2p": "Recv", "p2p_sn": 9}}))
    got = nccl_inspector.read(text, "rank2.log")
    assert [c["op"] for c in got.collectives] == ["all_reduce", "send", "recv"]
    assert got.collectives[0]["labels"] == {"comm_name": "PP Group 1", "algo": "RING", "proto": "LL"}
    assert got.collectives[1]["labels"] == {"comm_name": "PP Group 1", "peer": "3"}
    assert got.collectives[1]["bytes"] == 524288 and got.collectives[1]["seq"] == 8
    assert got.problems == [] and got.hosts == {2: "node3"}


def test_inspector_v43_marker_context_and_unknown_fields_listed_once() -> None:
    marker = {"header": _HEADER, "metadata": {**_META, "inspector_output_format_version": "v4.3"},
              "dump_stats": {"coll_records": 2, "p2p_records": 1, "proxy_records": 0}}
    text = "\n".join(json.dumps(o) for o in (
        marker, {"coll_perf": {**_COLL, "coll_new_thing": 1}}, {"coll_perf": {**_COLL, "coll_sn": 1408,
                                                                                "coll_new_thing": 2}},
        {"p2p_perf": _P2P}))
    got = nccl_inspector.read(text, "rank2.log")
    assert [(c["op"], c["rank"], c["group"]) for c in got.collectives] == [
        ("all_reduce", 2, "0x7f8c496ae9f661"), ("all_reduce", 2, "0x7f8c496ae9f661"), ("send", 2, "0x7f8c496ae9f661")]
    listed = [p for p in got.problems if "coll_perf.coll_new_thing" in p]
    assert len(listed) == 1 and got.versions == {"v4.3"}


# ---- NETCONF: Junos without its envelope ----

def test_junos_interface_information_without_rpc_reply_is_read(tmp_path: Path) -> None:
    reply = (FIXTURES / "netconf/junos-qfx-interfaces-extensive/reply.xml").read_text()
    body = re.sub(r"^\s*<rpc-reply[^>]*>|</rpc-reply>\s*$", "", reply.strip())
    body = body.replace("<interface-information ", '<interface-information xmlns:junos="http://xml.juniper.net/'
                        'junos/22.4R0/junos" ', 1)  # the prefix the envelope declared
    (tmp_path / "full.xml").write_text(reply)
    (tmp_path / "body.xml").write_text(body)
    full = _cli("parse", "-d", "sw1", "--ts", "1", str(tmp_path / "full.xml"))
    bare = _cli("parse", "-d", "sw1", "--ts", "1", str(tmp_path / "body.xml"))
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == full.stdout and bare.stdout.count("\n") > 10


# ---- gNMI: vendor-native paths and every unknown path listed ----

def _srl(leaf: str, value: str) -> gnmi_pb2.Notification:
    path = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="srl_nokia-interfaces:interface", key={"name": "ethernet-1/1"}),
                               gnmi_pb2.PathElem(name="statistics"), gnmi_pb2.PathElem(name=leaf)])  # fmt: skip
    return gnmi_pb2.Notification(timestamp=1, update=[gnmi_pb2.Update(path=path, val=gnmi_pb2.TypedValue(
        json_ietf_val=json.dumps(value).encode()))])


def test_gnmi_sr_linux_native_counters_are_mapped_and_the_rest_listed_with_counts() -> None:
    # leaves and values as SR Linux streams them (tests/fixtures/gnmic-srl/SOURCES.md)
    notes = [_srl("in-octets", "1000"), _srl("in-discarded-packets", "5"), _srl("in-broadcast-packets", "4"),
             _srl("in-broadcast-packets", "6"), _srl("carrier-transitions", "0")]
    batch = gnmi_parse("leaf1", notes)
    got = {s.metric: s.value for s in batch.samples}
    assert got == {"rx_bytes_total": 1000.0, "rx_discards_total": 5.0, "carrier_transitions_total": 0.0}
    assert batch.unmapped_list() == ["interface/statistics/in-broadcast-packets (2)"]


def test_gnmic_get_array_of_sr_linux_is_read() -> None:
    proc = _cli("parse", "-d", "leaf1", str(FIXTURES / "gnmic-srl/get-oper-state.json"))
    assert proc.returncode == 0 and json.loads(proc.stdout)["metric"] == "oper_up"


# ---- InfiniBand ----

def test_perfquery_old_short_names_are_read() -> None:
    proc = _cli("parse", "-d", "sw", str(FIXTURES / "ib-old/perfquery-tacc-stats-lid936.txt"))
    assert proc.returncode == 0, proc.stderr
    got = {ln["metric"]: ln["value"] for ln in map(json.loads, proc.stdout.splitlines())}
    assert got["tx_bytes_total"] == 905972985 * 4 and got["rx_bytes_total"] == 2411533950 * 4  # 4-octet words
    assert got["tx_packets_total"] == 22945597 and got["symbol_errors_total"] == 0


def test_ibnetdiscover_bad_guid_is_one_problem_and_no_cable_moves() -> None:
    text = (FIXTURES / "ib/ibnetdiscover-topology-rdma-core-man/ibnetdiscover.txt").read_text()
    full = parse_ibnetdiscover(text)
    redacted = parse_ibnetdiscover(text.replace("S-0008f10400410015", "S-xxxxxxxxxxxxxxxx"))
    assert len(redacted.problems) == 1 and "'xxxxxxxxxxxxxxxx'" in redacted.problems[0]
    # what is kept is exactly what the full file says about the other nodes: no port line of the
    # redacted switch lands on the switch above it
    kept = {(c.a_guid, c.a_port, c.b_guid, c.b_port) for c in redacted.cables}
    assert kept and kept < {(c.a_guid, c.a_port, c.b_guid, c.b_port) for c in full.cables}
    assert all("0008f10400410015" not in (c.a_guid, c.b_guid) for c in redacted.cables)


def test_gnmic_event_format_is_read_and_tags_only_events_named(tmp_path: Path) -> None:
    proc = _cli("parse", "-d", "srl1", str(FIXTURES / "gnmic-srl/events-processor-doc.json"))
    assert proc.returncode == 0, proc.stderr
    got = {ln["metric"]: ln["value"] for ln in map(json.loads, proc.stdout.splitlines())}
    assert got["rx_bytes_total"] == 35284165 and got["tx_bytes_total"] == 219527024
    assert got["rx_discards_total"] == 6377 and got["rx_errors_total"] == 128 and got["carrier_transitions_total"] == 1
    assert {ln["source"] for ln in map(json.loads, proc.stdout.splitlines())} == {"srl1:mgmt0"}  # key from the tag
    assert "interface/statistics/in-unicast-packets (1)" in _summary(proc.stderr)["unmapped"]
    f = tmp_path / "tags-only.json"
    f.write_text(json.dumps({"name": "s", "timestamp": 1, "tags": {"interface_name": "e1", "source": "x"}}))
    proc = _cli("parse", "-d", "srl1", "--format", "gnmic-json", str(f))
    assert proc.returncode == 2 and any("no values" in p for p in _summary(proc.stderr)["problems"])


def test_perfquery_value_that_is_no_counter_is_named_not_dropped(tmp_path: Path) -> None:
    text = (FIXTURES / "ib-old/perfquery-tacc-stats-lid936.txt").read_text()
    f = tmp_path / "pq.txt"
    f.write_text(text.replace("905972985", "N/A").replace("2411533950", "99999999999999999999"))
    proc = _cli("parse", "-f", "perfquery", "-d", "sw", str(f))
    got = {ln["metric"] for ln in map(json.loads, proc.stdout.splitlines())}
    assert proc.returncode == 0 and "tx_bytes_total" not in got and "rx_bytes_total" not in got
    assert "tx_packets_total" in got  # the rest of the port kept
    problems = _summary(proc.stderr)["problems"]
    assert any("XmtData='N/A'" in p for p in problems) and any("RcvData='99999999999999999999'" in p for p in problems)


# i43s: a walk printed by a tool (tests/fixtures/snmp-walk/netsnmp-py3-archlinux-nspawn) starts with a banner
# line, ends with a timing line, and prints Timeticks as a clock without the raw count. Before, it was not
# sniffed, the two lines were dropped without a word and every Timeticks value was "not a number".
def test_snmpwalk_with_a_banner_is_sniffed_and_its_other_lines_are_said() -> None:
    from fabricscope.collectors.formats import load
    raw = Path(__file__).resolve().parents[1] / "fixtures/snmp-walk/netsnmp-py3-archlinux-nspawn/walk.txt"
    assert raw.read_text().startswith("SNMP WALK on [")
    fmt = load().sniff(raw)
    assert fmt is not None and fmt.name == "snmpwalk"
    r = fmt.read(raw, "sw", 1.0)
    assert r.problems == ["2 lines not an OID line, skipped (wrapped values, banners), the first "
                          "\"SNMP WALK on ['.1.3.6.1.2.1.1', '1.3.6.1.2.1.2']\""]


def test_snmpwalk_timeticks_printed_as_a_clock_are_ticks() -> None:
    from fabricscope.collectors.switch.snmp.formats import read_snmpwalk
    varbinds, problems = read_snmpwalk(".1.3.6.1.2.1.1.3.0 = Timeticks: 0:0:11:50.48\n"
                                       ".1.3.6.1.2.1.1.3.0 = Timeticks: 4 days, 21:21:18.00\n"
                                       ".1.3.6.1.2.1.1.3.0 = Timeticks: (42835038) 4 days, 22:59:10.38\n")
    assert [v for _, v in varbinds] == [71048, ((4 * 24 + 21) * 3600 + 21 * 60 + 18) * 100, 42835038]
    assert problems == []


# i43t: Centreon's Cisco and Extreme VOSS walks (held back) and a Westermo switch's: a name (ifName, or ifDescr
# where there is none) carried by two ifIndexes. Before, both interfaces' series went under one source, each
# series twice, exit 0 and no problem line; a store keeps one at random.
def test_snmp_interfaces_sharing_a_name_are_kept_apart_and_said() -> None:
    from fabricscope.collectors.switch.snmp.parse import parse as snmp_parse
    ifx = "1.3.6.1.2.1.2.2.1"
    varbinds: list[tuple[str, int | bytes]] = [
        (f"{ifx}.2.4096", b"1"), (f"{ifx}.2.4098", b"1"), (f"{ifx}.2.7", b"vlan1"),
        (f"{ifx}.10.4096", 11), (f"{ifx}.10.4098", 22), (f"{ifx}.10.7", 33)]
    polled = snmp_parse("sw", varbinds, 1.0)
    got = sorted((s.source, s.value) for s in polled.samples if s.metric == "rx_bytes_total")
    assert got == [("sw:1#4096", 11.0), ("sw:1#4098", 22.0), ("sw:vlan1", 33.0)]
    assert polled.problems == ["interface name '1' is carried by ifIndex 4096, 4098: their samples named 1#<ifIndex>"]
    assert polled.if_names == {4096: "1#4096", 4098: "1#4098", 7: "vlan1"}  # LLDP names the same sources


# i43t: Centreon's FortiGate walk spells its types in capitals (COUNTER64:, GAUGE32:); before, every counter of its
# 53 interfaces was dropped with exit 0 and no problem line, only oper status (INTEGER) came out.
def test_snmpwalk_type_names_in_capitals_are_read() -> None:
    from fabricscope.collectors.switch.snmp.formats import read_snmpwalk
    varbinds, problems = read_snmpwalk(".1.3.6.1.2.1.31.1.1.1.6.3 = COUNTER64: 41444509\n"
                                       ".1.3.6.1.2.1.31.1.1.1.15.3 = GAUGE32: 1000\n"
                                       ".1.3.6.1.2.1.1.3.0 = 8074\n"  # -Ot: Timeticks without its type
                                       ".1.3.6.1.2.1.4.20.1.1.10.0.0.1 = IpAddress: 10.0.0.1\n"
                                       ".1.3.6.1.4.1.9.9.1.0 = Float: 1.5\n")
    assert varbinds == [("1.3.6.1.2.1.31.1.1.1.6.3", 41444509), ("1.3.6.1.2.1.31.1.1.1.15.3", 1000),
                        ("1.3.6.1.2.1.1.3.0", 8074)]
    # a type with no rule is said; one that carries no count (IpAddress) is skipped as before
    assert problems == ["1 OID lines of a type not read (Float), skipped, the first "
                        "'.1.3.6.1.4.1.9.9.1.0 = Float: 1.5'"]


# i43t: a walk as net-snmp prints it by default, with MIB names, indented in a document (a Siemens SCALANCE
# X204IRT in rtlabs-com/p-net's docs). Before: not sniffed, and `-f snmpwalk` refused it ("no varbinds").
def test_snmpwalk_with_mib_names_is_read_and_the_rest_said() -> None:
    from fabricscope.collectors.formats import load
    raw = Path(__file__).resolve().parents[1] / "fixtures/snmp-walk/siemens-scalance-x204irt-pnet-docs/walk.txt"
    assert "   IF-MIB::ifHCInOctets.1 = Counter64: 908950" in raw.read_text().splitlines()
    fmt = load().sniff(raw)
    assert fmt is not None and fmt.name == "snmpwalk"
    r = fmt.read(raw, "sw", 1.0)
    got = {(s.source, s.metric): s.value for s in r.samples}
    p1 = "sw:Siemens, SIMATIC NET, Ethernet Port, X1 P1"
    assert got[(p1, "rx_bytes_total")] == 908950  # ifHCInOctets, not ifInOctets (the same here)
    assert got[(p1, "rx_packets_total")] == 911 + 6744 + 1096  # HC unicast + multicast + broadcast
    assert got[(p1, "tx_bytes_total")] == 1516677
    assert r.problems[0].startswith("244 lines name an object with no numeric OID known here")


def test_snmp_ifhighspeed_that_disagrees_with_ifspeed_is_not_trusted() -> None:
    """The same SCALANCE puts b/s into ifHighSpeed (Mb/s): its 10 Mb/s ports read 10 Tb/s before."""
    from fabricscope.collectors.switch.snmp.parse import parse as snmp_parse
    polled = snmp_parse("sw", [("1.3.6.1.2.1.2.2.1.2.1", b"p1"), ("1.3.6.1.2.1.2.2.1.5.1", 10_000_000),
                               ("1.3.6.1.2.1.31.1.1.1.15.1", 10_000_000),
                               ("1.3.6.1.2.1.2.2.1.2.2", b"p2"), ("1.3.6.1.2.1.2.2.1.5.2", 4294967295),
                               ("1.3.6.1.2.1.31.1.1.1.15.2", 40_000)], 1.0)
    assert {s.source: s.value for s in polled.samples if s.metric == "speed_bps"} == {"sw:p1": 10e6, "sw:p2": 40e9}
    assert polled.problems == ["ifHighSpeed disagrees with ifSpeed on ifIndex 1 (ifIndex 1: ifHighSpeed 10000000 "
                               "Mb/s, ifSpeed 10000000 b/s): ifSpeed kept, exact below 4.29 Gb/s"]


def test_snmp_packets_of_an_agent_without_ifxtable_come_from_iftable() -> None:
    """i43t: an HP Envy printer's agent (held back) has no ifXTable; its packets were read from HC columns only
    and came out absent with no word. ifTable's unicast + non-unicast are every packet."""
    from fabricscope.collectors.switch.snmp.parse import parse as snmp_parse
    ift = "1.3.6.1.2.1.2.2.1"
    polled = snmp_parse("sw", [(f"{ift}.2.2", b"wlan0"), (f"{ift}.11.2", 13696), (f"{ift}.12.2", 4),
                               (f"{ift}.17.2", 3629), (f"{ift}.18.2", 0)], 1.0)
    got = {s.metric: s.value for s in polled.samples}
    assert got["rx_packets_total"] == 13700 and got["tx_packets_total"] == 3629
