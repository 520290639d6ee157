"""``fabricscope parse`` sniffs and reads each switch-side format on a recorded real output:
snmprec, snmpwalk -On, perfquery -x, ibnetdiscover (run as the real CLI, in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def parse_cli(path: Path) -> tuple[dict, list[dict]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "fabricscope", "parse", str(path), "--device", "sw1", "--ts", "1"],
                       capture_output=True, text=True, env=env, timeout=120, check=True)  # fmt: skip
    summary = json.loads(r.stderr.split("summary ", 1)[1].splitlines()[0])
    return summary, [json.loads(line) for line in r.stdout.splitlines()]


def _one(rows, source, metric, labels=None):
    hits = [r["value"] for r in rows if r.get("source") == source and r.get("metric") == metric
            and r.get("labels") == labels]  # fmt: skip
    assert len(hits) == 1, (source, metric, hits)
    return hits[0]


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (FIX / "snmp" / "juniper-mx960-12-cos-drops" / "input.snmprec", "snmprec"),
        (FIX / "snmp-walk" / "netsnmp-linux-snmpbulkwalk-On" / "walk.txt", "snmpwalk"),
        (FIX / "ib" / "perfquery-x-edr-switch-lid1719-2ports" / "perfquery.txt", "perfquery"),
        (FIX / "ib" / "ibnetdiscover-p-edr-osc" / "ibnetdiscover.txt", "ibnetdiscover"),
        (FIX / "ib" / "ibnetdiscover-topology-rdma-core-man" / "ibnetdiscover.txt", "ibnetdiscover"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.parent.name,
)
def test_parse_sniffs_and_reads(path, fmt):
    summary, rows = parse_cli(path)
    assert summary["format"] == fmt
    assert summary["items"] == len(rows) > 0
    assert summary["problems"] == []
    if fmt == "snmprec":  # vendor tables picked from the walk itself (no inventory hint here)
        assert _one(rows, "sw1:xe-0/2/1", "queue_dropped_packets_total", {"queue": "3"}) == 3309
    if fmt == "snmpwalk":  # recorded from this machine's net-snmp 5.9.3 snmpd
        walk = path.read_text()
        assert ".1.3.6.1.2.1.31.1.1.1.6.4 = Counter64: 288496694" in walk
        assert _one(rows, "sw1:eth0", "rx_bytes_total") == 288496694
        assert _one(rows, "sw1:eth0", "oper_up") == 1.0  # "INTEGER: 1"
    if fmt == "perfquery":
        assert _one(rows, "sw1:1", "rx_bytes_total") == 12279028775751 * 4
    if fmt == "ibnetdiscover":
        assert all(r["kind"] == "link" for r in rows)
