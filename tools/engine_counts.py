"""Counts of the correlation engine's size and knobs (issue #44's before/after table).

    .venv/bin/python tools/engine_counts.py            # service/correlate
    .venv/bin/python tools/engine_counts.py --json

rules: catalogued rules (service/correlate/rules), or 0 before the catalogue existed; constants:
tunable constants (module-level UPPERCASE numbers/tables of constants.py, the numeric fields of
EngineConfig and SeqParams) whose value is a number written there, less the catalogue's plumbing and
facts of the estimators: a constant defined as another (`min_mean = REL`, a rule's own name for a
shared number) or computed from others chooses no number of its own and is counted as `aliases`;
switches: their boolean fields; the
longest function (lines) and the largest module (lines); case citations: simulator runs cited in
product code (tests/correlate/test_no_case_citations.py's patterns, when that test exists).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "service" / "correlate"
CITATION = re.compile(r"\b\d{3} runs? \d+|\bruns? \d+ steps? \d+|\bstop \d{2}\b|issue #\d+|seed set|held back at")


def _chosen(value: ast.expr | None) -> bool:
    """Whether a constant's value is a number (or a table of them) written where it is defined, not
    a name or an expression of names (an alias or a derived value)."""
    return value is not None and not any(isinstance(n, ast.Name) and n.id.isupper() or isinstance(n, ast.Attribute)
                                         for n in ast.walk(value))


def _config_fields(tree: ast.Module) -> list[tuple[str, bool, bool]]:
    """(Class.field, is_bool, chosen) of EngineConfig and SeqParams."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("EngineConfig", "SeqParams"):
            for st in node.body:
                scalar = isinstance(st, ast.AnnAssign) and isinstance(st.annotation, ast.Name) and (
                    st.annotation.id in ("bool", "int", "float"))
                if scalar and isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    is_bool = isinstance(st.annotation, ast.Name) and st.annotation.id == "bool"
                    out.append((f"{node.name}.{st.target.id}", is_bool, _chosen(st.value)))
    return out


def _module_constants(tree: ast.Module) -> list[tuple[str, bool]]:
    """(NAME, chosen) of constants.py's module-level constants."""
    names = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id.isupper() and not target.id.startswith("DEFAULT_"):
            names.append((target.id, _chosen(getattr(node, "value", None))))
    return names


def _functions(tree: ast.Module) -> list[tuple[str, int]]:
    return [(n.name, (n.end_lineno or n.lineno) - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def counts(engine: Path = ENGINE) -> dict[str, object]:
    const_tree = ast.parse((engine / "constants.py").read_text())
    fields = _config_fields(const_tree)
    plumbing: set[str] = set()
    rules = 0
    if (engine / "rules" / "catalogue.py").exists():
        sys.path.insert(0, str(ROOT.parent))
        from fabricscope.service.correlate import rules as catalogue  # noqa: PLC0415

        plumbing = set(catalogue.PLUMBING) | set(getattr(catalogue, "FACTS", ()))
        rules = len(catalogue.RULES)
    consts = [(c, chosen) for c, chosen in _module_constants(const_tree) if c not in plumbing]
    numeric = [(f, chosen) for f, b, chosen in fields if not b and f not in plumbing]
    switches = [f for f, b, _ in fields if b]
    aliases = sum(not chosen for _, chosen in consts + numeric)
    files = sorted(engine.rglob("*.py"))
    root = engine.parent.parent
    funcs = [(f"{p.relative_to(root)}:{name}", n) for p in files for name, n in _functions(ast.parse(p.read_text()))]
    longest = max(funcs, key=lambda x: x[1])
    largest = max(((str(p.relative_to(root)), len(p.read_text().splitlines())) for p in files), key=lambda x: x[1])
    cites = sum(len(CITATION.findall(p.read_text())) for p in files)
    return {"rules": rules, "constants": len(consts) + len(numeric) - aliases, "aliases": aliases,
            "switches": len(switches),
            "longest_function": {"name": longest[0], "lines": longest[1]},
            "largest_module": {"name": largest[0], "lines": largest[1]},
            "case_citations": cites, "plumbing": len(plumbing)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--engine", type=Path, default=ENGINE, help="the engine package (default: service/correlate)")
    args = ap.parse_args()
    c = counts(args.engine)
    if args.json:
        print(json.dumps(c, indent=2))
        return
    for k, v in c.items():
        print(f"{k:18} {v['name'] + ' ' + str(v['lines']) + ' lines' if isinstance(v, dict) else v}")


if __name__ == "__main__":
    main()
