"""`fabricscope parse` on the PCIe fixtures: an NCCL topology dump and a sysfs tree, each against
the samples recorded next to it (tests/fixtures/pcie/*/expected.jsonl)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.collectors.formats import load
from fabricscope.collectors.host.pcie_formats import FORMATS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pcie"
REPO = FIXTURES.parent.parent.parent


def parse(*args: str) -> tuple[int, list[dict[str, object]], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "fabricscope", "parse", *args], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines() if line.strip()], p.stderr


@pytest.mark.parametrize(("case", "path", "device", "fmt"), [
    ("ibm-h100-vsi-nccl-topo", "topo.xml", "h100-a", "nccl-topo"),
    ("dgx-spark-gb10-nccl-topo", "topo.xml", "spark2", "nccl-topo"),
    ("a100-nccl-source-notes-cut", "topo.xml", "a100", "nccl-topo"),
    ("hwloc-40intel64-2g2n4c", "sys", "node40", "sysfs-pcie"),
])
def test_parse_fixture_gives_the_expected_samples(case: str, path: str, device: str, fmt: str) -> None:
    rc, got, err = parse(str(FIXTURES / case / path), "--device", device, "--ts", "1700000000")
    assert rc == 0, err
    assert f'"format": "{fmt}"' in err  # sniffed
    want = [json.loads(line) for line in (FIXTURES / case / "expected.jsonl").read_text().splitlines()]
    assert got == want


def test_h100_dump_has_every_gpu_and_nic_at_gen5_and_no_zero_width() -> None:
    _, got, err = parse(str(FIXTURES / "ibm-h100-vsi-nccl-topo" / "topo.xml"), "--device", "h100-a")
    assert '"format": "nccl-topo"' in err  # sniffed
    assert {s["source"] for s in got} == {f"h100-a:gpu{i}" for i in range(8)} | {f"h100-a:mlx5_{i}" for i in range(8)}
    assert {(s["metric"], s["value"]) for s in got} == {("pcie_link_generation_max", 5.0), ("speed_bps", 200e9)}
    assert {s["source"] for s in got if s["metric"] == "speed_bps"} == {f"h100-a:mlx5_{i}" for i in range(8)}


def test_sysfs_tree_reports_an_hca_once_not_again_for_its_netdev() -> None:
    _, got, _ = parse(str(FIXTURES / "hwloc-40intel64-2g2n4c" / "sys"), "--device", "node40")
    assert [(s["source"], s["metric"], s["value"]) for s in got] == [
        ("node40:qib0", "pcie_link_generation", 3.0), ("node40:qib0", "pcie_link_width", 4.0)]


def test_not_an_nccl_dump_is_a_parse_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.xml"
    bad.write_text("<topology version='3.0'/>")
    rc, _, err = parse(str(bad), "--format", "nccl-topo")
    assert rc == 2 and "expected <system>" in err


def test_formats_are_registered() -> None:
    assert {f.name for f in FORMATS} <= set(load().formats)


def test_collector_polls_the_same_samples_with_its_own_time() -> None:
    from fabricscope.collectors.host.pcie_formats import PcieLinkCollector

    got = PcieLinkCollector("node40", sys_root=FIXTURES / "hwloc-40intel64-2g2n4c" / "sys").poll()
    assert [(s.source, s.metric, s.value) for s in got] == [
        ("node40:qib0", "pcie_link_generation", 3.0), ("node40:qib0", "pcie_link_width", 4.0)]
    assert all(s.ts > 1_700_000_000 for s in got)
