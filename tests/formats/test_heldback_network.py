"""The held-back network recordings of issue #43 collected in i43r (docs/heldback/network.md): each
one's second run is pinned (read as ``fabricscope parse`` would, sniffed, no --format), and spot checks
tie values back to the raw reply.

Regenerate after a deliberate mapping change with ``python tests/formats/test_heldback_network.py --regen``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricscope.collectors import formats  # noqa: E402
from fabricscope.core.errors import ParseError  # noqa: E402
from tests.host.canon import canon  # noqa: E402

HELD = Path(__file__).resolve().parents[1] / "fixtures/heldback/network"
NETCONF = sorted(p for p in HELD.glob("netconf/*/reply.xml"))


def _parsed(raw: Path) -> dict:
    reg = formats.load()
    fmt = reg.sniff(raw)
    assert fmt is not None, f"{raw} not sniffed"
    try:
        r = fmt.read(raw, "sw1", 1_700_000_000.0)
    except ParseError as exc:
        return {"format": fmt.name, "refused": str(exc)}
    return {"format": fmt.name, "samples": canon(r.samples), "problems": r.problems, "unmapped": r.unmapped}


@pytest.mark.parametrize("raw", NETCONF, ids=[p.parent.name for p in NETCONF])
def test_held_back_netconf_second_run(raw: Path) -> None:
    assert _parsed(raw) == json.loads((raw.parent / "expected.json").read_text())


def _leaf(raw: Path, interface: str, path: str) -> float:
    root = ET.parse(raw).getroot()
    for phys in root.iter():
        if phys.tag.rpartition("}")[2] == "physical-interface":
            name = next(c for c in phys if c.tag.rpartition("}")[2] == "name")
            if (name.text or "").strip() == interface:
                node = phys
                for step in path.split("/"):
                    node = next(c for c in node if c.tag.rpartition("}")[2] == step)
                return float((node.text or "").strip())
    raise AssertionError(f"{interface} {path} not in {raw}")


def _value(got: dict, source: str, metric: str) -> float:
    hits = [s["value"] for s in got["samples"] if s["source"] == source and s["metric"] == metric and "labels" not in s]
    assert len(hits) == 1, (source, metric, hits)
    return hits[0]


def test_junos_counts_come_from_the_reply_and_the_unmapped_ones_are_listed() -> None:
    raw = HELD / "netconf/eznc-junos-factory/reply.xml"
    got = _parsed(raw)
    for metric, leaf in (("rx_bytes_total", "traffic-statistics/input-bytes"),
                         ("tx_packets_total", "traffic-statistics/output-packets"),
                         ("rx_discards_total", "input-error-list/input-drops")):
        assert _value(got, "sw1:ge-0/0/1", metric) == _leaf(raw, "ge-0/0/1", leaf)
    # the 24 policed discards of ge-0/0/1 are not read as a metric, so they must be named
    assert _leaf(raw, "ge-0/0/1", "input-error-list/input-discards") == 24
    assert "input-error-list/input-discards (2)" in got["unmapped"]


def test_a_reply_of_logical_interfaces_only_is_refused_saying_what_it_holds() -> None:
    got = _parsed(HELD / "netconf/eznc-junos-routing-instance-media/reply.xml")
    assert got["refused"].endswith("it holds logical-interface x1")


def test_ibnetdiscover_infiniscale_iv_links_are_the_files_own() -> None:
    """Found after the bad-GUID work (not held back): one run, pinned. Five HCAs on one QDR switch."""
    raw = Path(__file__).resolve().parents[1] / "fixtures/ib/ibnetdiscover-infiniscale-iv-qdr-mlx4/ibnetdiscover.txt"
    fmt = formats.load().sniff(raw)
    assert fmt is not None and fmt.name == "ibnetdiscover"
    r = fmt.read(raw, "fab", 1_700_000_000.0)
    got = sorted((link.a, link.b, link.speed_bps) for link in r.links)
    assert got == [("ip-160:HCA-1", "sw-0002c9020046c588:33", 40e9), ("ip-210:mlx4_0", "sw-0002c9020046c588:36", 40e9),
                   ("ip-211:mlx4_0", "sw-0002c9020046c588:1", 40e9), ("ip-212:mlx4_0", "sw-0002c9020046c588:14", 40e9),
                   ("ip-213:mlx4_0", "sw-0002c9020046c588:16", 40e9)]
    assert r.problems == []


def test_held_back_perfquery_without_its_header_hash_second_run() -> None:
    """The mail archive dropped the "#" of the header; the fields are OFED 1.x short names."""
    raw = HELD / "perfquery/ofed-2008-ompi-users-lid12.txt"
    text = raw.read_text()
    assert not text.lstrip().startswith("#")
    got = _parsed(raw)
    assert got["format"] == "perfquery" and got["problems"] == []
    values = {(s["source"], s["metric"]): s["value"] for s in got["samples"]}
    field = {k: float(int(v.strip("."), 0)) for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":." in ln)}
    assert values[("sw1:1", "symbol_errors_total")] == field["SymbolErrors"] == 7836
    assert values[("sw1:1", "rx_errors_total")] == field["RcvErrors"]
    assert values[("sw1:1", "tx_discards_total")] == field["XmtDiscards"]
    assert values[("sw1:1", "tx_bytes_total")] == 4 * field["XmtData"]  # 4-octet words
    assert values[("sw1:1", "rx_bytes_total")] == 4 * field["RcvData"]
    assert "RcvRemotePhysErrors" in got["unmapped"]


def test_perfquery_wrapper_lines_are_named_not_dropped() -> None:
    raw = Path(__file__).resolve().parents[1] / "fixtures/ib/perfquerymany-lid61-extended-2010/perfquery.txt"
    got = _parsed(raw)
    assert got["problems"] == ["line not a perfquery field, skipped: 'timestamp 1279194662.416459'"]
    values = {s["metric"]: s["value"] for s in got["samples"]}
    assert values["tx_bytes_total"] == 4 * 2865699555629 and values["rx_packets_total"] == 15372362298


# i43t: four snmpwalks held back unread (docs/heldback/network.md). Second run: every series once, every
# interface's byte counters equal to the walk's own (ifHC octets, else ifTable's), a shared name said.
SNMPWALK = {  # case -> (samples, interfaces, names carried by more than one ifIndex, other problem lines)
    "cisco-standard-centreon": (981, 170, 47, 0),
    "extreme-voss-7520-48y-centreon": (315, 63, 7, 0),
    "mellanox-centreon": (550, 55, 0, 0),
    "mikrotik-chateau-lte6-centreon": (110, 11, 0, 0),
    # held back after the MIB-name reader: an HP printer (ifTable only: packets from ifTable since its first run),
    # a lab Cisco 7200's walk cut to its interface lines by script; other MIBs and the command line said
    "hp-envy6000-printer": (30, 3, 0, 2),
    "netman-lab-midterm-cut": (58, 6, 0, 1),
}
_WALK = re.compile(r"^\.?([\d.]+) = [\w-]+: ?(.*)$")


def _walk_columns(raw: Path) -> dict[str, dict[int, str]]:
    cols: dict[str, dict[int, str]] = {}
    for line in raw.read_text().splitlines():
        if m := _WALK.match(line):
            head, _, idx = m[1].rpartition(".")
            cols.setdefault(head, {})[int(idx)] = m[2].strip().strip('"')
    return cols


def _walk_named(raw: Path) -> dict[str, dict[int, str]]:
    """The same columns of a walk printed with MIB names, by the names of the columns the test reads."""
    names = {"ifName": "1.3.6.1.2.1.31.1.1.1.1", "ifDescr": "1.3.6.1.2.1.2.2.1.2",
             "ifHCInOctets": "1.3.6.1.2.1.31.1.1.1.6", "ifInOctets": "1.3.6.1.2.1.2.2.1.10",
             "ifHCOutOctets": "1.3.6.1.2.1.31.1.1.1.10", "ifOutOctets": "1.3.6.1.2.1.2.2.1.16"}
    cols: dict[str, dict[int, str]] = {}
    for line in raw.read_text().splitlines():
        if (m := re.match(r"^\s*IF-MIB::(\w+)\.(\d+) = [\w-]+: ?(.*)$", line)) and m[1] in names:
            cols.setdefault(names[m[1]], {})[int(m[2])] = m[3].strip().strip('"')
    return cols


@pytest.mark.parametrize("case", sorted(SNMPWALK))
def test_held_back_snmpwalk_second_run(case: str) -> None:
    raw = HELD / "snmpwalk" / case / "walk.txt"
    got = _parsed(raw)
    n_samples, n_interfaces, n_shared, n_other = SNMPWALK[case]
    series = [(s["source"], s["metric"]) for s in got["samples"]]
    assert got["format"] == "snmpwalk" and len(series) == n_samples == len(set(series))
    assert len({src for src, _ in series}) == n_interfaces
    assert len([p for p in got["problems"] if "is carried by ifIndex" in p]) == n_shared
    assert len(got["problems"]) == n_shared + n_other
    cols = _walk_named(raw) if "::" in raw.read_text()[:4000] else _walk_columns(raw)
    names = cols.get("1.3.6.1.2.1.31.1.1.1.1") or cols["1.3.6.1.2.1.2.2.1.2"]
    counts = Counter(names.values())
    values = {(s["source"], s["metric"]): s["value"] for s in got["samples"]}
    checked = 0
    for metric, hc, low in (("rx_bytes_total", "1.3.6.1.2.1.31.1.1.1.6", "1.3.6.1.2.1.2.2.1.10"),
                            ("tx_bytes_total", "1.3.6.1.2.1.31.1.1.1.10", "1.3.6.1.2.1.2.2.1.16")):
        for if_index, name in names.items():
            want = cols.get(hc, {}).get(if_index) or cols.get(low, {}).get(if_index)
            if want is not None:
                source = f"sw1:{name}" if counts[name] == 1 else f"sw1:{name}#{if_index}"
                assert values[(source, metric)] == int(want), (source, metric)
                checked += 1
    # Cisco's slim walk has output octets only, and for 160 of its 170 interfaces
    assert checked >= (160 if case.startswith("cisco") else n_interfaces)


# i43t: four ibnetdiscover dumps held back unread (vendor docs via jabl/ibtopotool's tests, Mellanox's parser task);
# first run all right, pinned as it came out: every link with its speed, and the problems.
IBNET = sorted(p for p in HELD.glob("ibnetdiscover/*")
               if p.suffix == ".topo" or p.name == "mellanox-topo-parser-task-small.txt")


def _links(raw: Path) -> dict:
    fmt = formats.load().sniff(raw)
    assert fmt is not None and fmt.name == "ibnetdiscover"
    r = fmt.read(raw, "fab", 1_700_000_000.0)
    return {"links": sorted([link.a, link.b, link.speed_bps] for link in r.links), "problems": r.problems}


@pytest.mark.parametrize("raw", IBNET, ids=[p.name for p in IBNET])
def test_held_back_ibnetdiscover_first_run(raw: Path) -> None:
    assert _links(raw) == json.loads(raw.with_name(raw.name + ".expected.json").read_text())


def test_held_back_ibnetdiscover_links_are_the_files_cables() -> None:
    """Each link is a port line of the file: the SX6012 of NVIDIA's article, its QDR and SDR HCAs, and the
    SwitchIB's loopback cables (port to port of one switch) as they are cabled."""
    got = _links(HELD / "ibnetdiscover/nvidia-ibdiagpath-article-3.topo")
    assert ["r-ufm96:HCA-1", "switch-de779e:8", 10e9] in got["links"]  # "[8] ... r-ufm96 HCA-1 ... 4xSDR"
    assert ["sw-e41d2d030003e470:1", "sw-e41d2d030003e470:2", 100e9] in got["links"]
    assert got["problems"] == ["unrecognised line: src/query_smp.c:195; umad (DR path slid 0; dlid 0; 0,1,1,31 "
                               "Attr 0x11:0) bad status 110; Connection timed out"]


if __name__ == "__main__" and "--regen" in sys.argv:
    for raw in NETCONF:
        (raw.parent / "expected.json").write_text(json.dumps(_parsed(raw), indent=1) + "\n")
        print("wrote", raw.parent / "expected.json")
    for raw in IBNET:
        raw.with_name(raw.name + ".expected.json").write_text(json.dumps(_links(raw), indent=1) + "\n")
        print("wrote", raw.with_name(raw.name + ".expected.json"))
