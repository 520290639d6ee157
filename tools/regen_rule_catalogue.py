"""Write the rule catalogue (service/correlate/rules) into docs/correlation-engine.md between its markers.

    .venv/bin/python tools/regen_rule_catalogue.py          # rewrite the section
    .venv/bin/python tools/regen_rule_catalogue.py --check  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fabricscope.service.correlate.rules import catalogue_markdown  # noqa: E402

DOC = ROOT / "docs" / "correlation-engine.md"
BEGIN = "<!-- rule catalogue: generated from service/correlate/rules; do not edit by hand -->"
END = "<!-- end rule catalogue -->"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC}: no rule catalogue markers")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = f"{head}{BEGIN}\n\n{catalogue_markdown()}\n{END}{tail}"
    if args.check:
        sys.exit(0 if new == text else f"{DOC}: rule catalogue is stale (run tools/regen_rule_catalogue.py)")
    DOC.write_text(new)
    print(f"{DOC}: rule catalogue written ({catalogue_markdown().count(chr(10))} lines)")


if __name__ == "__main__":
    main()
