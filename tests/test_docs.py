"""The documentation stays navigable: a short README, links that resolve, no lost section.

The README was one 1,100-line file until the split into docs/ (commit af604a2 holds the last
version). ``OLD_HEADINGS`` is that file's ``##``/``###`` headings, so a section cannot silently
disappear in a later edit; ``RENAMED`` lists the ones whose heading changed in the move.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

OLD_HEADINGS = (
    "Quick start (two commands)",
    "How it fits together",
    "The command line",
    "Configuration",
    "HTTP API",
    "Topology file",
    "Storage",
    "Training jobs: steps, collectives, checkpoints",
    "Instrumenting a script (3 lines)",
    "Environment",
    "What the hook promises the training loop",
    "Importing timings you already have (`fabricscope import ...`)",
    "Host agent (`fabricscope agent`)",
    "Switch collectors (`fabricscope collect`)",
    "Inventory",
    "What is collected",
    "How SNMP polls stay cheap",
    "Measured (bench/snmp_poll.py, run as root, 2 cores shared with other sessions)",
    "Running the tests (CI)",
    "Why was this step slow? (correlation engine)",
    "How it decides",
    "Simulator (`fabricscope simulate`)",
    "Benchmark",
    "Alerts and webhooks",
    "Detection",
    "Alert records",
    "Webhooks",
    "Settings",
    "Deploy with docker-compose",
    "Dashboards",
    "Observing fabricscope itself",
    "Scaling out (NATS JetStream)",
    "The fabric lab: an end-to-end proof on real kernel networking",
    "What runs",
    "Linux-switch collector (`collectors/lab/linux_switch.py`)",
    "Faults and their ground truth (`service/lab/faults.py`)",
    "Results",
    "Notes for the engine (found with real signals)",
    "Teardown",
    "Use",
    "Development and tests",
    "Measured on this project's 2-core development machine",
    "Benchmarks (`bench/`, each prints ratios against a baseline measured in the same run)",
)

# Old heading -> its heading now (the lab moved to tests/lab/; docs/dashboards.md already had a
# "Grafana dashboards" page, so the README's short section became its last section).
RENAMED = {
    "Dashboards": "Dashboards next to `make run`",
    "Linux-switch collector (`collectors/lab/linux_switch.py`)": "Linux-switch collector (`tests/lab/linux_switch.py`)",
    "Faults and their ground truth (`service/lab/faults.py`)": "Faults and their ground truth (`tests/lab/faults.py`)",
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def doc_files() -> list[Path]:
    files = [README, *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted(p for p in (ROOT / "collectors").rglob("README.md") if p.is_file())
    return files


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks (a ``#`` comment in a code sample is no heading)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def headings(path: Path) -> list[str]:
    return [m.group(2) for line in prose_lines(path) if (m := _HEADING.match(line))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    kept = [c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN"]
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        base = slug(h)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def relative_links(path: Path) -> list[str]:
    links = []
    for line in prose_lines(path):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            links.append(target)
    return links


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n < 200, f"README.md has {n} lines; move detail into docs/"


def test_readme_keeps_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "## Quick start (two commands)" in text
    assert re.search(r"^make run\s+#", text, re.M) and re.search(r"^make test\s+#", text, re.M)


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_old_readme_section_is_still_a_heading() -> None:
    now = {h for p in doc_files() for h in headings(p)}
    missing = [old for old in OLD_HEADINGS if RENAMED.get(old, old) not in now]
    assert not missing, f"sections of the old README with no heading now: {missing}"


def test_renamed_headings_are_really_renamed() -> None:
    # A mapping entry whose old heading still exists verbatim is stale and would hide a loss.
    now = {h for p in doc_files() for h in headings(p)}
    assert not [old for old in RENAMED if old in now]


def test_slug_matches_github() -> None:
    assert slug("Measured (bench/snmp_poll.py, run as root, 2 cores shared with other sessions)") == (
        "measured-benchsnmp_pollpy-run-as-root-2-cores-shared-with-other-sessions"
    )
    assert slug("Dashboards next to `make run`") == "dashboards-next-to-make-run"
