"""The Linux-switch collector's pure parse, on recorded real output (tests/fixtures/linux_switch/<case>/:
tc_qdisc.json, nft_counters.json, expected.json; recorded with tests/lab/record_linux_switch.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabricscope.core.errors import ParseError
from tests.lab.linux_switch import ROOT, merge, parse_counters, parse_qdiscs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "linux_switch"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.exists() else []


def _poll(case: Path) -> list[dict[str, object]]:
    qd, qecn = parse_qdiscs((case / "tc_qdisc.json").read_text(), "leaf1", 1.0, ("swp*",))
    counters = parse_counters((case / "nft_counters.json").read_text(), "leaf1", 1.0, ("swp*",))
    return [s.to_json() for s in merge("leaf1", 1.0, qd, qecn, counters, {})]


@pytest.mark.parametrize("case", CASES)
def test_recorded_output(case: str) -> None:
    got = sorted(_poll(FIXTURES / case), key=lambda s: (s["source"], s["metric"], str(s.get("labels"))))
    want = json.loads((FIXTURES / case / "expected.json").read_text())
    assert got == want


def test_fixtures_exist() -> None:
    assert CASES, f"no recorded cases under {FIXTURES}"


def test_shaped_port_counts_drops_and_marks() -> None:
    samples = _poll(FIXTURES / CASES[0])
    by = {(s["source"], s["metric"], json.dumps(s.get("labels"), sort_keys=True)): s["value"] for s in samples}
    assert by[("leaf1:swp2", "tx_discards_total", '{"qdisc": "root"}')] > 0  # the short pfifo overflowed
    assert by[("leaf1:swp1", "tx_discards_total", '{"qdisc": "root"}')] == 0  # noqueue, never drops
    assert by[("leaf1:swp2", "ecn_marked_packets_total", "null")] > 0
    assert by[("leaf1:swp1", "rx_fcs_errors_total", '{"via": "nft"}')] > 0
    assert all(not s["source"].startswith("leaf1:br0") for s in samples)  # only the ports asked for


@pytest.mark.parametrize("text", ["{not json", '{"a": 1}'])
def test_malformed_qdisc_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="leaf1"):
        parse_qdiscs(text, "leaf1", 1.0)


def test_malformed_rows_are_skipped_not_fatal() -> None:
    rows = [{"dev": 5, "root": True}, {"kind": "tbf"}, {"dev": "swp1", "root": True, "drops": "x", "backlog": 10}]
    samples, _ = parse_qdiscs(json.dumps(rows), "leaf1", 1.0)
    assert [(s.source, s.metric, s.value) for s in samples] == [("leaf1:swp1", "queue_occupancy_bytes", 10.0)]


def test_counters_of_unknown_kind_or_port_are_ignored() -> None:
    doc = {"nftables": [{"metainfo": {}}, {"counter": {"name": "ecn_swp3", "packets": 7}},
                        {"counter": {"name": "mystery_swp3", "packets": 9}},
                        {"counter": {"name": "ecn_br0", "packets": 1}},
                        {"counter": {"name": "fcs_swp3", "packets": "x"}}]}
    assert parse_counters(json.dumps(doc), "leaf1", 1.0, ("swp*",)) == {("swp3", "ecn_marked_packets_total"): 7.0}


def test_gso_super_packets_count_as_wire_frames() -> None:
    """veth passes GSO super-packets: the recorded ECN counter saw 398 of them carrying 4,267,680 bytes."""
    text = (FIXTURES / CASES[0] / "nft_counters.json").read_text()
    plain = parse_counters(text, "leaf1", 1.0, ("swp*",))
    frames = parse_counters(text, "leaf1", 1.0, ("swp*",), wire_frame_bytes=1514)
    assert plain[("swp2", "ecn_marked_packets_total")] == 398
    assert frames[("swp2", "ecn_marked_packets_total")] == 4_267_680 // 1514
    assert frames[("swp2", "ecn_marked_packets_total")] > 7 * plain[("swp2", "ecn_marked_packets_total")]
    # small packets never count as less than one frame each
    doc = {"nftables": [{"counter": {"name": "fcs_swp1", "packets": 50, "bytes": 50 * 66}}]}
    got = parse_counters(json.dumps(doc), "leaf1", 1.0, wire_frame_bytes=1514)
    assert got == {("swp1", "rx_fcs_errors_total"): 50.0}


# -- egress queues (#16): the qdisc on each class of a queue-splitting root is that queue --------------

def _by_queue(samples: list[dict[str, Any]], source: str) -> dict[tuple[str, str], float]:
    return {(s["metric"], s["labels"]["queue"]): float(s["value"]) for s in samples
            if s["source"] == source and "queue" in (s.get("labels") or {})}


def test_recorded_mq_queues_map_onto_queue_metrics() -> None:
    """Recorded on this kernel: swp2's mq root with a tbf+pfifo per transmit queue; flows on queues 2, 3."""
    samples = _poll(FIXTURES / "shaped_queues")
    q = _by_queue(samples, "leaf1:swp2")
    assert {k[1] for k in q} == {"0", "1", "2", "3"}
    assert q[("queue_occupancy_bytes", "3")] == 54504 and q[("queue_occupancy_bytes", "2")] == 0
    assert q[("queue_dropped_packets_total", "2")] == 210 and q[("queue_dropped_packets_total", "3")] == 240
    root = {s["metric"]: s["value"] for s in samples if s["source"] == "leaf1:swp2" and s.get("labels") == ROOT}
    # the queues add up to the port's root qdisc (drops, backlog)
    assert sum(v for (m, _), v in q.items() if m == "queue_dropped_packets_total") == root["tx_discards_total"]
    assert sum(v for (m, _), v in q.items() if m == "queue_occupancy_bytes") == root["queue_occupancy_bytes"]
    assert q[("tx_queue_bytes_total", "3")] == 1230820 and q[("tx_queue_packets_total", "3")] == 826
    assert not _by_queue(samples, "leaf1:swp1")  # noqueue: no queues


def test_queue_ecn_marks_sum_the_marking_qdiscs_under_each_queue() -> None:
    """iproute2's JSON: a default mq root is handle "0:" and its classes ":1", ":2"; fq_codel counts
    "ecn_mark", red "marked". A marking qdisc nested under a shaper counts for the shaper's queue."""
    rows = [{"kind": "mq", "handle": "0:", "dev": "swp5", "root": True, "bytes": 9, "drops": 0, "backlog": 0},
            {"kind": "fq_codel", "handle": "0:", "dev": "swp5", "parent": ":1", "bytes": 5, "packets": 1,
             "drops": 0, "backlog": 0, "ecn_mark": 7},
            {"kind": "tbf", "handle": "20:", "dev": "swp5", "parent": ":2", "bytes": 4, "packets": 1, "drops": 2,
             "backlog": 100},
            {"kind": "red", "handle": "21:", "dev": "swp5", "parent": "20:1", "bytes": 4, "packets": 1,
             "xstats": {"marked": 3, "early": 1}},
            {"kind": "prio", "handle": "1:", "dev": "swp6", "root": True},
            {"kind": "pfifo", "handle": "10:", "dev": "swp6", "parent": "1:3", "drops": 4, "backlog": 0},
            {"kind": "tbf", "handle": "1:", "dev": "swp7", "root": True},
            {"kind": "pfifo", "handle": "10:", "dev": "swp7", "parent": "1:1", "drops": 4}]
    samples, ecn = parse_qdiscs(json.dumps(rows), "leaf1", 1.0)
    got = _by_queue([s.to_json() for s in samples], "leaf1:swp5")
    assert got[("ecn_marked_packets_total", "0")] == 7 and got[("ecn_marked_packets_total", "1")] == 3
    assert got[("queue_occupancy_bytes", "1")] == 100 and got[("queue_dropped_packets_total", "1")] == 2
    assert _by_queue([s.to_json() for s in samples], "leaf1:swp6") == {
        ("queue_dropped_packets_total", "2"): 4.0, ("queue_occupancy_bytes", "2"): 0.0}  # prio band 3 -> "2"
    assert not _by_queue([s.to_json() for s in samples], "leaf1:swp7")  # a shaper's class is not a queue
    assert ecn == {"swp5": 10.0}  # the port's total ECN marks, as before
