"""GPU parsers against recorded real outputs: every ``tests/fixtures/gpu/<case>/`` holds one or more
raw outputs, each next to the samples it must give (origins: tests/fixtures/gpu/SOURCES.md):

- ``nvidia-smi-q-x.xml``  -> ``expected-smi.json``
- ``metrics.txt`` (a dcgm-exporter scrape) -> ``expected-dcgm.json`` (samples, XIDs, unmapped fields)
- ``nvidia-smi-topo-m.txt`` -> ``expected-topo.json`` (the matrix as data)

Regenerate after a deliberate mapping change with
``PYTHONPATH=. .venv/bin/python tests/host/test_gpu_fixtures.py --regen`` and review the diff.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricscope.collectors.host.gpu import parse_dcgm, parse_smi_xml, parse_topo_matrix  # noqa: E402
from fabricscope.core.metrics import CATALOGUE  # noqa: E402
from fabricscope.core.model import Sample  # noqa: E402
from tests.host.canon import canon

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
TS = 1_700_000_000.0


def _smi(raw: Path) -> Any:
    return canon(parse_smi_xml(raw.read_text(), TS, "node"))


def _dcgm(raw: Path) -> Any:
    r = parse_dcgm(raw.read_text(), TS, "node")
    return {"samples": canon(r.samples), "xids": r.xids, "unmapped": r.unmapped, "problems": r.problems}


def _topo(raw: Path) -> Any:
    t = parse_topo_matrix(raw.read_text())
    return {"gpus": list(t.gpus), "nics": list(t.nics), "nic_names": t.nic_names,
            "cpu_affinity": t.cpu_affinity, "numa_affinity": t.numa_affinity,
            "matrix": {f"{a}->{b}": c for (a, b), c in sorted(t.matrix.items())},
            "nearest_nics": {g: t.nearest_nics(g) for g in t.gpus}}


READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "nvidia-smi-q-x.xml": ("expected-smi.json", _smi),
    "metrics.txt": ("expected-dcgm.json", _dcgm),
    "nvidia-smi-topo-m.txt": ("expected-topo.json", _topo),
}
PAIRS = sorted((case / raw, case / exp) for case in FIXTURES.iterdir() if case.is_dir()
               for raw, (exp, _) in READERS.items() if (case / raw).exists())


@pytest.mark.parametrize(("raw", "expected"), PAIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_pair(raw: Path, expected: Path) -> None:
    actual = READERS[raw.name][1](raw)
    assert actual == json.loads(expected.read_text())


def _samples_of(raw: Path) -> list[Sample]:
    if raw.name == "nvidia-smi-q-x.xml":
        return parse_smi_xml(raw.read_text(), TS, "node")
    return parse_dcgm(raw.read_text(), TS, "node").samples


@pytest.mark.parametrize("raw", [r for r, _ in PAIRS if r.name != "nvidia-smi-topo-m.txt"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_are_canonical_and_one_per_series(raw: Path) -> None:
    samples = _samples_of(raw)
    assert samples, "a recorded GPU output gives samples"
    assert {s.metric for s in samples} <= set(CATALOGUE), "GPU readers emit canonical names only"
    keys = [(s.source, s.metric, tuple(sorted((s.labels or {}).items()))) for s in samples]
    assert len(keys) == len(set(keys)), "one value per series per poll"
    assert all(s.value >= 0 for s in samples), "missing values are absent, never -1"
    ratios = [s.value for s in samples if s.metric.endswith("_ratio")]
    assert all(0 <= v <= 1 for v in ratios), "percent became a 0-1 ratio"


def test_more_than_one_gpu_generation_is_covered() -> None:
    products = {raw.parent.name for raw, _ in PAIRS if raw.name == "nvidia-smi-q-x.xml"}
    assert len(products) >= 3  # Hopper H200, Ampere A100 (MIG), Turing T4


if __name__ == "__main__" and "--regen" in sys.argv:
    for raw, expected in PAIRS:
        expected.write_text(json.dumps(READERS[raw.name][1](raw), indent=1) + "\n")
        print("wrote", expected)
