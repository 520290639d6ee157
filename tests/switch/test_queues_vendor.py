"""Vendor queue telemetry over gNMI beyond SONiC: NVIDIA Cumulus Linux's openconfig-qos stream as
gnmic prints it (a recorded reply, through ``fabricscope parse``), and the rows its documented metric
list adds to the path table (switch-priority PFC frames, WRED + no-buffer drops as parts of one count)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fabricscope.collectors.switch.gnmi import gnmic, paths
from fabricscope.collectors.switch.gnmi.parse import parse as gnmi_parse
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from tests.switch.fixture_io import FIXTURES

CUMULUS = FIXTURES / "gnmi" / "cumulus-gnmic-qos-queue"
ROOT = Path(__file__).resolve().parents[2]


def test_fabricscope_parse_reads_the_recorded_gnmic_output_of_a_cumulus_queue():
    r = subprocess.run([sys.executable, "-m", "fabricscope", "parse", "-d", "sw1", str(CUMULUS / "gnmic.json")],
                       capture_output=True, text=True, cwd=ROOT, check=True)  # fmt: skip
    summary = json.loads(r.stderr.strip().splitlines()[-1].partition(" ")[2])
    assert summary["format"] == "gnmic-json" and summary["problems"] == []
    samples = [{k: v for k, v in json.loads(line).items() if k != "kind"} for line in r.stdout.splitlines()]
    assert samples == json.loads((CUMULUS / "expected.json").read_text())["samples"]
    # tie the sample back to the recording: the event's ns timestamp, the keyed Path, the value
    event = list(gnmic.json_stream((CUMULUS / "gnmic.json").read_text()))[1]
    (leaf, value), = event["updates"][0]["values"].items()
    assert samples == [{"ts": event["timestamp"] / 1e9, "source": "sw1:swp1", "metric": "tx_queue_bytes_total",
                        "value": float(value), "labels": {"queue": "1"}}]  # fmt: skip
    assert leaf.endswith("/state/transmit-octets")


def test_gnmic_keys_may_hold_slashes_and_a_value_below_the_update_path_is_kept():
    # Arista/Cisco interface names carry "/"; a subtree update lists leaves below its Path
    event = {"timestamp": 1, "updates": [{
        "Path": "qos/interfaces/interface[interface-id=Ethernet1/1]/output/queues/queue[name=UC3]/state",
        "values": {"qos/interfaces/interface/output/queues/queue/state/transmit-pkts": 12,
                   "qos/interfaces/interface/output/queues/queue/state/dropped-pkts": 3,
                   "interfaces/interface/state/counters/in-octets": 9}}]}  # fmt: skip
    problems: list[str] = []
    n = gnmic.notification(event, problems)
    assert n is not None
    got = {(s.source, s.metric, tuple(sorted((s.labels or {}).items())), s.value)
           for s in gnmi_parse("sw1", [n]).samples}
    assert got == {("sw1:Ethernet1/1", "tx_queue_packets_total", (("queue", "UC3"),), 12.0),
                   ("sw1:Ethernet1/1", "queue_dropped_packets_total", (("queue", "UC3"),), 3.0)}  # fmt: skip
    assert len(problems) == 1 and "in-octets" in problems[0]  # not under the update's path: reported


def _note(*leaves: tuple[str, int]) -> gnmi_pb2.Notification:
    """Paths exactly as NVIDIA's gNMI metric list writes them (keys from its older table)."""
    from pygnmi.create_gnmi_path import gnmi_path_generator

    return gnmi_pb2.Notification(timestamp=10**18, update=[
        gnmi_pb2.Update(path=gnmi_path_generator(p), val=gnmi_pb2.TypedValue(uint_val=v)) for p, v in leaves])


Q = "qos/interfaces/interface[interface-id=swp1]/output/queues/queue[name=3]/state/"
PRIO = "qos/interfaces/interface[interface-id=swp1]/state/switch-priority[priority=3]/counters/"


def test_cumulus_documented_leaves_pfc_per_priority_and_drop_parts_summed():
    got = {(s.metric, tuple(sorted((s.labels or {}).items())), s.value) for s in gnmi_parse("sw1", [_note(
        (PRIO + "in-pause-pkts", 11), (PRIO + "out-pause-pkts", 13),
        (Q + "wred-dropped-pkts", 5), (Q + "no-buffer-uc-dropped-pkts", 7), (Q + "ecn-marked-pkts", 2))]).samples}
    assert got == {("rx_pause_frames_total", (("priority", "3"),), 11.0),
                   ("tx_pause_frames_total", (("priority", "3"),), 13.0),
                   ("queue_dropped_packets_total", (("queue", "3"),), 12.0),  # WRED 5 + no-buffer 7
                   ("ecn_marked_packets_total", (("queue", "3"),), 2.0)}  # fmt: skip


def test_a_total_drop_leaf_wins_over_the_parts_and_a_repeated_part_is_not_added_twice():
    parts = gnmi_parse("sw1", [_note((Q + "wred-dropped-pkts", 5), (Q + "wred-dropped-pkts", 6))]).samples
    assert [s.value for s in parts] == [6.0]
    total = gnmi_parse("sw1", [_note((Q + "wred-dropped-pkts", 5), (Q + "dropped-pkts", 40),
                                     (Q + "no-buffer-uc-dropped-pkts", 7))]).samples  # fmt: skip
    assert [s.value for s in total] == [40.0]
    # watermark-max counts cells, not bytes: deliberately not a queue_watermark_bytes row
    assert not any(key[-1] == "watermark-max" for key in paths.COUNTERS)
