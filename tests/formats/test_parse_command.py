"""`fabricscope parse`: every registered format reads its recorded input, is sniffed without
--format, and a bad input gets exit 2 with a message (never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fabricscope.collectors import formats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = sorted(p for p in (FIXTURES / "formats").iterdir() if (p / "case.json").is_file())


def run_parse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabricscope", "parse", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def _summary(stderr: str) -> dict:
    line = next(ln for ln in stderr.splitlines() if ln.startswith("summary "))
    return json.loads(line.removeprefix("summary "))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recorded_input_is_sniffed_and_read(case: Path) -> None:
    spec = json.loads((case / "case.json").read_text())
    proc = run_parse(str(FIXTURES / spec["input"]), "--device", spec["device"], "--ts", "1700000000",
                     *spec.get("args", []))
    assert proc.returncode == 0, proc.stderr
    items = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = _summary(proc.stderr)
    assert summary["format"] == spec["format"]
    assert summary["items"] == len(items) > 0
    samples = {(i["source"], i["metric"], json.dumps(i.get("labels"), sort_keys=True)): i for i in items
               if i["kind"] == "sample"}
    assert all(i["ts"] == 1700000000 for i in samples.values())
    for want in spec["expect"]:
        key = (want["source"], want["metric"], json.dumps(want.get("labels"), sort_keys=True))
        assert key in samples, f"{key} not read; got {sorted(samples)[:20]}"
        assert samples[key]["value"] == pytest.approx(want["value"])
    assert set(spec.get("unmapped_includes", [])) <= set(summary["unmapped"])


def test_every_format_has_a_case_or_a_test_of_its_own() -> None:
    """A format registered without a recorded input to prove it is a format nobody checked."""
    reg = formats.load()
    covered = {json.loads((c / "case.json").read_text())["format"] for c in CASES}
    tests = [p for d in FIXTURES.parent.iterdir() if d.is_dir() and d.name != "fixtures"
             for p in d.glob("test_*.py") if p.name != Path(__file__).name]
    tested_elsewhere = {n for n in reg.formats if any(f'"{n}"' in p.read_text() for p in tests)}
    assert set(reg.formats) - covered - tested_elsewhere == set()


def test_named_format_overrides_the_sniffer(tmp_path: Path) -> None:
    raw = tmp_path / "stats.txt"
    raw.write_text("\n".join(f"{i} {i}" for i in range(5)))  # no format's sniffer takes it
    assert run_parse(str(raw)).returncode == 2
    proc = run_parse(str(FIXTURES / "host/thisvm-6.18/proc/pressure/cpu"), "--format", "proc-pressure",
                     "--resource", "cpu", "-d", "h1")
    assert proc.returncode == 0 and _summary(proc.stderr)["format"] == "proc-pressure"


def test_headerless_ethtool_paste_is_read_and_the_sniffed_driver_is_a_guess(tmp_path: Path) -> None:
    """A ``ethtool -S dev | grep ...`` paste has no header (refused before #43); the driver sniffed from
    its keys is a guess: exit 3 until --driver confirms it."""
    raw = tmp_path / "stats.txt"
    raw.write_text((FIXTURES / "ethtool/mlx5-connectx-100g-cn-notes/ethtool-S.txt").read_text()
                   .replace("NIC statistics:", ""))
    proc = run_parse(str(raw), "-d", "h1:eth0")
    assert proc.returncode == 3 and "--driver mlx5_core" in _summary(proc.stderr)["guesses"][0]
    proc = run_parse(str(raw), "-d", "h1:eth0", "--driver", "mlx5_core")
    assert proc.returncode == 0 and _summary(proc.stderr)["guesses"] == []


def test_an_option_the_format_does_not_take_is_refused() -> None:
    proc = run_parse(str(FIXTURES / "host/thisvm-6.18/proc/pressure/cpu"), "--driver", "ice")
    assert proc.returncode == 2 and "takes no --driver" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["/nonexistent/file"], "no such file"),
    (["README.md"], "format not recognised"),
    (["README.md", "--format", "no-such-format"], "unknown format 'no-such-format'; known:"),
    (["README.md", "--format", "diskstats"], "not readable as diskstats"),
    (["tests", "--format", "ethtool-S"], "reads a file"),
])
def test_bad_input_exits_2_with_a_message(args: list[str], message: str) -> None:
    proc = run_parse(*args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_list_names_every_format() -> None:
    proc = run_parse("--list")
    assert proc.returncode == 0
    listed = {line.split()[0] for line in proc.stdout.splitlines()}
    assert listed == set(formats.load().formats)


def test_docs_list_every_format() -> None:
    page = (FIXTURES.parents[1] / "docs/parse.md").read_text()
    assert {n for n in formats.load().formats if f"| `{n}` |" not in page} == set()
