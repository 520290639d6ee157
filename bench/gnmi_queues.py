"""Bench: CPU cost of parsing a gNMI subscription to the queue paths of a 64-port switch, against the
interface-counter parse of the same switch, in the same run.

Workloads (one SAMPLE interval of a 64-port switch each; values from the recorded fixtures):

* ``interfaces (baseline)``  openconfig-interfaces counters: the recorded SONiC Ethernet35
  notification (tests/fixtures/gnmi/sonic-ethernet35-oc-counters), one per port, one Update per leaf
* ``sonic Queues vpath``     SONiC COUNTERS_DB ``COUNTERS/Ethernet*/Queues``: one JSON value holding
  20 queues per port, each with the recorded field set of ``Ethernet68:3`` (15 fields, PFC watchdog incl.)
* ``sonic port stats``       ``COUNTERS/Ethernet*``: the recorded 108-field port dump per port (PFC 0-7)
* ``openconfig-qos``         queue state as one Update per leaf (transmit-pkts/-octets, dropped-pkts/
  -octets), 8 queues per port. No device recording exists; the paths follow the model.

An "update" below is one counter value (a leaf, or one field of a SONiC object), so the figures
compare like with like. Prints CPU seconds per 1,000 updates and the ratio to the baseline.

    .venv/bin/python bench/gnmi_queues.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricscope.collectors.switch.gnmi.parse import parse  # noqa: E402
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2  # noqa: E402
from tests.switch.fixture_io import FIXTURES, read_gnmi  # noqa: E402

PORTS = 64
SONIC_RAW = FIXTURES / "gnmi" / "sonic-countersdb-queues-pfc" / "raw"


def interfaces() -> tuple[list[gnmi_pb2.Notification], int]:
    rec = read_gnmi(FIXTURES / "gnmi" / "sonic-ethernet35-oc-counters" / "responses.json")
    notes = []
    for port in range(PORTS):
        for r in rec:
            n = gnmi_pb2.Notification()
            n.CopyFrom(r.update)
            for e in n.prefix.elem:
                if e.name == "interface":
                    e.key["name"] = f"Ethernet{port * 4}"
            notes.append(n)
    return notes, sum(len(n.update) for n in notes)


def _sonic_note(path: str, value: dict) -> gnmi_pb2.Notification:
    n = gnmi_pb2.Notification(timestamp=1, prefix=gnmi_pb2.Path(target="COUNTERS_DB"))
    u = n.update.add()
    u.path.elem.extend(gnmi_pb2.PathElem(name=p) for p in path.split("/"))
    u.val.json_ietf_val = json.dumps(value).encode()
    return n


def sonic_queues() -> tuple[list[gnmi_pb2.Notification], int]:
    fields = json.loads((SONIC_RAW / "COUNTERS+Ethernet68+Queues.txt").read_text())["Ethernet68:3"]
    value = {f"Ethernet{p * 4}:{q}": fields for p in range(PORTS) for q in range(20)}
    return [_sonic_note("COUNTERS/Ethernet*/Queues", value)], len(value) * len(fields)


def sonic_ports() -> tuple[list[gnmi_pb2.Notification], int]:
    fields = json.loads((SONIC_RAW / "COUNTERS+Ethernet68.txt").read_text())
    value = {f"Ethernet{p * 4}": fields for p in range(PORTS)}
    return [_sonic_note("COUNTERS/Ethernet*", value)], len(value) * len(fields)


def openconfig_qos() -> tuple[list[gnmi_pb2.Notification], int]:
    notes = []
    for p in range(PORTS):
        for q in range(8):
            n = gnmi_pb2.Notification(timestamp=1)
            n.prefix.elem.extend([gnmi_pb2.PathElem(name="qos"), gnmi_pb2.PathElem(name="interfaces"),
                                  gnmi_pb2.PathElem(name="interface", key={"interface-id": f"Ethernet{p * 4}"}),
                                  gnmi_pb2.PathElem(name="output"), gnmi_pb2.PathElem(name="queues"),
                                  gnmi_pb2.PathElem(name="queue", key={"name": str(q)}),
                                  gnmi_pb2.PathElem(name="state")])  # fmt: skip
            for i, leaf in enumerate(("transmit-pkts", "transmit-octets", "dropped-pkts", "dropped-octets")):
                u = n.update.add()
                u.path.elem.add(name=leaf)
                u.val.uint_val = 1000 * i + q
            notes.append(n)
    return notes, sum(len(n.update) for n in notes)


def cpu_per_call(notes: list[gnmi_pb2.Notification], rounds: int) -> tuple[float, int]:
    parse("sw1", notes)  # warm-up
    times = []
    samples = 0
    for _ in range(rounds):
        t0 = time.process_time()
        batch = parse("sw1", notes)
        times.append(time.process_time() - t0)
        samples = len(batch.samples)
    return statistics.median(times), samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    workloads = {"interfaces (baseline)": interfaces(), "sonic Queues vpath": sonic_queues(),
                 "sonic port stats": sonic_ports(), "openconfig-qos": openconfig_qos()}  # fmt: skip
    base = None
    print(f"{'workload':<24}{'updates':>9}{'samples':>9}{'CPU s/poll':>12}{'CPU s/1k upd':>14}{'ratio':>8}")
    for name, (notes, updates) in workloads.items():
        cpu, samples = cpu_per_call(notes, args.rounds)
        per_k = cpu / updates * 1000
        base = base if base is not None else per_k
        print(f"{name:<24}{updates:>9}{samples:>9}{cpu:>12.4f}{per_k:>14.5f}{per_k / base:>8.2f}")
    print(f"({PORTS} ports, median of {args.rounds} rounds, process CPU time)")


if __name__ == "__main__":
    main()
