"""Host parsers against recorded real outputs: every ``tests/fixtures/<collector>/<case>/`` holds
the raw input, ``case.json`` (parameters and origin) and ``expected.json`` (canonical samples).

Regenerate an expected.json after a deliberate mapping change with
``.venv/bin/python tests/host/test_parsers.py --regen`` and review the diff.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricscope.collectors.host import nic, rdma, storage  # noqa: E402
from fabricscope.core.model import Sample  # noqa: E402
from tests.host.canon import canon

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TS = 1_700_000_000.0


def _ethtool(case: Path, c: dict[str, Any]) -> list[Sample]:
    stats = nic.parse_ethtool_stats((case / "ethtool-S.txt").read_text())
    return nic.map_ethtool(stats, c["driver"], TS, c["source"])


def _sysfs_net(case: Path, c: dict[str, Any]) -> list[Sample]:
    col = nic.NicCollector(c["host"], sys_root=case / "sys", exclude=(), ethtool=None)
    out = []
    for iface in col.interfaces():
        out += nic.parse_netdev(col.fetch_sysfs(iface), TS, f"{c['host']}:{iface}")
    return out


def _rdma(case: Path, c: dict[str, Any]) -> list[Sample]:
    out = []
    for (dev, port), hw in rdma.parse_rdma_statistic((case / "rdma-statistic.txt").read_text()).items():
        out += rdma.map_port({}, hw, TS, rdma.ib_source(c["host"], dev, port))
    return out


def _ib(case: Path, c: dict[str, Any]) -> list[Sample]:
    out = []
    for port, counters in rdma.parse_perfquery((case / "perfquery.txt").read_text()).items():
        out += rdma.map_port(counters, {}, TS, f"{c['device']}:{port}")
    return out


def _diskstats(case: Path, c: dict[str, Any]) -> list[Sample]:
    files = sorted(case.glob("diskstats*"))
    mean = storage.IntervalMean()
    out: list[Sample] = []
    for i, f in enumerate(files):  # two snapshots: the second poll adds the latency gauges
        out, lat = [], []
        for dev, fields in storage.parse_diskstats(f.read_text()).items():
            src = f"{c['host']}:{dev}"
            out += storage.disk_samples(fields, TS + i, src)
            lat += [(src, f"{op}_latency_seconds", fields[f"{op}s"], fields[f"{op}_ms"] / 1e3)
                    for op in ("read", "write") if f"{op}_ms" in fields]
        out += [Sample(TS + i, s, m, v) for (s, m), v in mean.update(lat).items()]
    return out


def _nfs(case: Path, c: dict[str, Any]) -> list[Sample]:
    out = []
    for m in storage.parse_mountstats((case / "mountstats").read_text()):
        out += storage.nfs_samples(m, TS, f"{c['host']}:{m.mountpoint}")
    return out


def _lustre(case: Path, c: dict[str, Any]) -> list[Sample]:
    return storage.lustre_samples(storage.parse_lprocfs_stats((case / "stats").read_text()), TS, c["source"])


COMPUTE: dict[str, Callable[[Path, dict[str, Any]], list[Sample]]] = {
    "ethtool": _ethtool, "sysfs_net": _sysfs_net, "rdma": _rdma, "ib": _ib,
    "diskstats": _diskstats, "nfs": _nfs, "lustre": _lustre,
}
CASES = sorted(p for col in COMPUTE for p in (FIXTURES / col).iterdir() if (p / "case.json").exists())


def _actual(case: Path) -> list[dict[str, Any]]:
    return canon(COMPUTE[case.parent.name](case, json.loads((case / "case.json").read_text())))


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_case(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    actual = _actual(case)
    assert actual == expected
    keys = [(r["source"], r["metric"], tuple(sorted(r.get("labels", {}).items()))) for r in actual]
    assert len(keys) == len(set(keys)), "one value per series per poll"
    assert all(r["value"] >= 0 for r in actual), "missing values are absent, never -1"


def test_every_collector_has_cases() -> None:
    assert {c.parent.name for c in CASES} == set(COMPUTE)


if __name__ == "__main__" and "--regen" in sys.argv:
    for case in CASES:
        (case / "expected.json").write_text(json.dumps(_actual(case), indent=1) + "\n")
        print("wrote", case / "expected.json")
