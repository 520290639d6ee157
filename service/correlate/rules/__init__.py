"""The engine's decision rules as data: ids (ids.py), the catalogue (catalogue.py), its Markdown.

`python -m fabricscope.service.correlate.rules` prints the catalogue that docs/correlation-engine.md
holds between its catalogue markers (tests/correlate/test_rule_catalogue.py checks they agree).
"""

from __future__ import annotations

from fabricscope.service.correlate import constants
from fabricscope.service.correlate.rules.catalogue import FACTS, PLUMBING, RULES, SHARED
from fabricscope.service.correlate.rules.model import Rule, Shared

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
FAMILIES = {
    "evidence": "Evidence: what counts as a signal",
    "baseline": "Baseline: what every verdict is measured against",
    "verdict": "Verdict: is the step slow?",
    "promote": "Promote: a step under the bar that was slowed all the same",
    "demote": "Demote: a step only the sequential test flagged that shows nothing of its own",
    "cause": "Cause: which layer and component lost the time",
    "adjust": "Adjust: rules that re-weigh, reorder or rename the causes found",
}


def catalogue_markdown() -> str:
    """The catalogue as Markdown: one table per family, rules in precedence order."""
    lines: list[str] = []
    for fam, title in FAMILIES.items():
        lines += [f"### {title}", "", "| id | claim | inputs | constants | switches |", "|---|---|---|---|---|"]
        for r in sorted((r for r in RULES if r.family == fam), key=lambda r: r.precedence):
            consts = ", ".join(f"`{c}`" for c in r.constants) or "—"
            switches = ", ".join(f"`{s}`" for s in r.switches) or "—"
            lines.append(f"| `{r.id}` | {r.claim} | {', '.join(r.inputs)} | {consts} | {switches} |")
        lines.append("")
    lines += [
        "### Shared numbers: one principle, several rules",
        "",
        "| number | value | principle | the rules' own names for it |",
        "|---|---|---|---|",
    ]
    for sh in SHARED:
        names = ", ".join(f"`{a}`" for a in sh.aliases)
        lines.append(f"| `{sh.name}` | {getattr(constants, sh.name):g} | {sh.claim} | {names} |")
    lines.append("")
    lines.append("Facts of the estimators (not tuned): " + ", ".join(f"`{c}`" for c in FACTS) + ".")
    lines.append("")
    lines.append("Plumbing (speed and bookkeeping, never an answer): " + ", ".join(f"`{c}`" for c in PLUMBING) + ".")
    return "\n".join(lines) + "\n"


__all__ = ["BY_ID", "FACTS", "PLUMBING", "RULES", "SHARED", "Rule", "Shared", "catalogue_markdown"]
