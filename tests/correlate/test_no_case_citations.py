"""Product code states a rule's principle, never the simulator case that prompted it.

The correlation engine's comments and docstrings once cited cases ("781 run 35 step 60", "stop 44",
"issue #15", "a development seed set"); those belong in tests named after the rule they exercise.
This scans every file of service/correlate (comments and docstrings are plain text here) for the
citation forms and names each offending file:line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "service" / "correlate"

# (pattern, what it cites)
CITATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{3} runs? \d+"), "a seed's run"),
    (re.compile(r"\bruns? \d+ steps? \d+"), "a run's step"),
    (re.compile(r"\bstops? \d+"), "a development stop"),
    (re.compile(r"\bissue #?\d+", re.IGNORECASE), "an issue"),
    (re.compile(r"#\d{2,}\b"), "an issue number"),
    (re.compile(r"\bseed set\b"), "a seed set"),
    (re.compile(r"\bseeds? \d+"), "numbered seeds"),
    (re.compile(r"\bheld back at\b"), "a held-back run"),
    (re.compile(r"\b\d{3}/\d{3}\b"), "a pair of seeds"),
)


def citations(text: str, name: str) -> list[str]:
    """`name:line: what (the matched text)` for every citation in `text`."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, what in CITATIONS:
            for m in pattern.finditer(line):
                found.append(f"{name}:{n}: {what} ({m.group(0)!r})")
    return found


def test_engine_cites_no_case() -> None:
    files = sorted(ENGINE.glob("*.py"))
    assert len(files) > 10, "service/correlate not found"
    found = [c for f in files for c in citations(f.read_text(), str(f.relative_to(ROOT)))]
    assert not found, "product code cites cases (state the rule's principle; cite cases in tests):\n" + "\n".join(found)


def test_each_citation_form_is_caught() -> None:
    """Each form the engine once used is found, on the line it is on."""
    old = [
        "x = 1  # (781 run 35 step 60: a GPU 9.6 sigmas out)",
        "# neither names a cause (859 run 7 step 52, +0.3 %)",
        "# two such steps at step 7 (799/803 stop 40)",
        '"""A sustained episode (issue #15 item 2)."""',
        "# -- GPU and host evidence (#17) ---",
        "# (a development seed set: 2 such false slow steps)",
        "# (881 runs 0 and 13, held back at stop 44's first run)",
        "# often enough (17 false slow steps on 811/821)",
        "# FAINT_REL's 3 %: false slow steps 3 -> 2 (seeds 23, 29)",
    ]
    for n, line in enumerate(old, 1):
        assert any(c.startswith(f"old.py:{n}: ") for c in citations(line if n == 1 else "\n" * (n - 1) + line,
                                                                       "old.py")), line
    # general numbers stay: a sampling interval, a step count, a magnitude
    assert citations("# a 10-s sample covers five 2-s steps; step 0 compiles; 40 steps, +5 %", "ok.py") == []
