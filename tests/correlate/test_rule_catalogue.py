"""The rule catalogue (service/correlate/rules) is the list of the engine's rules: every id the engine
writes is catalogued and used, every tunable constant has one owner, and the docs print it."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from fabricscope.service.correlate import constants
from fabricscope.service.correlate.constants import EngineConfig, SeqParams
from fabricscope.service.correlate.rules import BY_ID, FACTS, PLUMBING, RULES, SHARED, catalogue_markdown, ids

ENGINE = Path(constants.__file__).resolve().parent
DOCS = ENGINE.parent.parent / "docs" / "correlation-engine.md"
TESTS = Path(__file__).resolve().parent.parent
ID_NAMES = {k: v for k, v in vars(ids).items() if k.isupper() and isinstance(v, str)}


def _all_constants() -> set[str]:
    tree = ast.parse((ENGINE / "constants.py").read_text())
    mod = {t.id for n in tree.body for t in ([*n.targets] if isinstance(n, ast.Assign) else
                                             [n.target] if isinstance(n, ast.AnnAssign) else [])
           if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("DEFAULT_")}
    # EngineConfig.disabled names rules to skip (an ablation), it is no constant
    return mod | {f"EngineConfig.{f.name}" for f in fields(EngineConfig) if f.name != "disabled"} | {
        f"SeqParams.{f.name}" for f in fields(SeqParams)}


def test_every_id_is_catalogued_once_and_every_rule_has_an_id() -> None:
    assert len(BY_ID) == len(RULES), "two rules share an id"
    assert set(ID_NAMES.values()) == set(BY_ID)
    assert all(re.fullmatch(r"[a-z]+\.[a-z_]+", r.id) for r in RULES)
    assert len({r.precedence for r in RULES}) == len(RULES), "two rules share a precedence"


def test_every_rule_states_its_claim_and_inputs() -> None:
    for r in RULES:
        assert r.claim.endswith(".") and 40 <= len(r.claim) <= 400, r.id
        assert r.inputs, r.id


def test_every_tunable_constant_has_exactly_one_owner() -> None:
    owned = [c for r in RULES for c in (*r.constants, *r.switches)] + list(PLUMBING) + list(FACTS) + [
        sh.name for sh in SHARED]
    dupes = sorted({c for c in owned if owned.count(c) > 1})
    assert not dupes, f"owned twice: {dupes}"
    known = _all_constants()
    assert not set(owned) - known, f"not constants of constants.py: {sorted(set(owned) - known)}"
    assert not known - set(owned), f"no rule owns: {sorted(known - set(owned))}"


def _defaults() -> dict[str, ast.expr]:
    """Each constant of constants.py (`NAME`, `EngineConfig.field`, `SeqParams.field`) -> its value's
    expression as written."""
    tree = ast.parse((ENGINE / "constants.py").read_text())
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                out[target.id] = node.value
        if isinstance(node, ast.ClassDef):
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                    out[f"{node.name}.{st.target.id}"] = st.value
    return out


def _names_in(expr: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def test_shared_numbers_are_chosen_once_and_their_aliases_are_only_names_for_them() -> None:
    """A shared number is written once (a literal); each rule's own name for it is defined by it (so
    changing the principle changes every rule that states it) and carries its value; and a constant
    defined by a shared number is listed as its alias (the catalogue's table is complete)."""
    defaults = _defaults()
    shared = {sh.name: sh for sh in SHARED}
    for sh in SHARED:
        assert isinstance(defaults[sh.name], ast.Constant), f"{sh.name} is not a number written once"
        assert len(sh.aliases) >= 2, f"{sh.name} is shared by fewer than two rules"
        for alias in sh.aliases:
            assert sh.name in _names_in(defaults[alias]), f"{alias} is not defined by {sh.name}"
    for name, expr in defaults.items():
        for used in _names_in(expr) & set(shared):
            assert name in shared[used].aliases, f"{name} is defined by {used} but not listed as its alias"
    assert EngineConfig().storage_data_share == constants.MAJORITY
    assert SeqParams().pair_z == constants.OUTLIER_Z == constants.MIN_SCORE


def test_switches_are_booleans_and_constants_are_not() -> None:
    kinds = {f"{c.__name__}.{f.name}": f.type for c in (EngineConfig, SeqParams) for f in fields(c)}
    for r in RULES:
        assert all(kinds.get(s) in (bool, "bool") for s in r.switches), r.id
        assert all(kinds.get(c) not in (bool, "bool") for c in r.constants), r.id


def test_the_engine_writes_every_catalogued_id() -> None:
    """An id nobody writes is a rule that does not exist (the evidence and baseline rules shape what
    every verdict and cause reads, and are named in the catalogue only)."""
    src = "\n".join(p.read_text() for p in ENGINE.rglob("*.py") if "rules" not in p.parts)
    unused = [v for k, v in ID_NAMES.items() if f"ids.{k}" not in src and not v.startswith(("evidence.", "baseline."))]
    assert not unused, f"catalogued but never written: {unused}"


def test_docs_hold_the_generated_catalogue() -> None:
    text = DOCS.read_text()
    begin, end = "<!-- rule catalogue: generated", "<!-- end rule catalogue -->"
    assert begin in text and end in text, "docs/correlation-engine.md lacks the catalogue markers"
    inner = text.split(begin, 1)[1].split("-->", 1)[1].split(end, 1)[0]
    assert inner.strip() == catalogue_markdown().strip(), (
        "docs/correlation-engine.md's rule catalogue is stale: regenerate it with "
        "`.venv/bin/python tools/regen_rule_catalogue.py`")


# The deciding rules (families verdict, promote, demote, cause) that no test asserts yet: each is an
# answer a different rule could produce by accident without any test noticing. Empty today; an id
# goes here only with a comment saying why no test can assert it yet, and comes off as soon as one
# does (the test below fails on a stale entry too).
NOT_ASSERTED_YET: frozenset[str] = frozenset()


def test_every_deciding_rule_is_asserted_by_a_test() -> None:
    """Every verdict, promote, demote and cause rule is referenced (as `ids.NAME` or its id string) by
    some test besides this file, so that a test fails when another rule produces the right answer by
    accident; except NOT_ASSERTED_YET, which lists the gaps."""
    deciding = {k: v for k, v in ID_NAMES.items() if v.split(".")[0] in ("verdict", "promote", "demote", "cause")}
    assert set(NOT_ASSERTED_YET) <= set(deciding.values()), sorted(set(NOT_ASSERTED_YET) - set(deciding.values()))
    me = Path(__file__).resolve()
    text = "\n".join(p.read_text() for p in sorted(TESTS.rglob("*.py")) if p.resolve() != me)

    def referenced(name: str, rule: str) -> bool:
        return bool(re.search(rf"\bids\.{name}\b", text)) or f'"{rule}"' in text or f"'{rule}'" in text

    missing = sorted(v for k, v in deciding.items() if not referenced(k, v) and v not in NOT_ASSERTED_YET)
    assert not missing, f"deciding rules no test asserts: {missing}"
    stale = sorted(v for k, v in deciding.items() if referenced(k, v) and v in NOT_ASSERTED_YET)
    assert not stale, f"asserted now, take them off NOT_ASSERTED_YET: {stale}"
