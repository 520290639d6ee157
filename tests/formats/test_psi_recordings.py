"""Real PSI recordings (tests/fixtures/psi, SOURCES.md there): each is read as `fabricscope parse` would
(sniffed, no --resource) and every resource's stall time equals the ``total=`` its paste printed under
that resource's name, with no guess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricscope.collectors import formats

PSI = Path(__file__).resolve().parents[1] / "fixtures/psi"
CASES = sorted(p for p in PSI.iterdir() if (p / "case.json").is_file())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_psi_recording_is_read_under_the_resource_its_paste_names(case: Path) -> None:
    spec = json.loads((case / "case.json").read_text())
    raw = case / spec["input"]
    fmt = formats.load().sniff(raw)
    assert fmt is not None and fmt.name == "proc-pressure"
    r = fmt.read(raw, "h1", 1_700_000_000.0)
    got = {(s.metric, s.labels["level"]): s.value for s in r.samples}
    want = {(f"{res}_pressure_seconds_total", level): us / 1e6
            for res, levels in spec["total_us"].items() for level, us in levels.items()}
    assert got == pytest.approx(want)
    assert r.guesses == []
    for res, levels in spec["total_us"].items():  # the values are the paste's own
        for us in levels.values():
            assert f"total={us}" in raw.read_text(), (res, us)
