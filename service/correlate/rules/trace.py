"""Writing rule ids into drafts and answers, so every answer can name the rules that decided it."""

from __future__ import annotations

from fabricscope.service.correlate.records import Attribution, CauseDraft


def tagged(draft: CauseDraft, rule: str) -> CauseDraft:
    """`draft` as built by cause rule `rule`."""
    draft["rule"] = rule
    return draft


def noted(draft: CauseDraft, rule: str) -> CauseDraft:
    """`draft` with adjustment rule `rule` recorded (once)."""
    adjust = draft.setdefault("adjust", [])
    if rule not in adjust:
        adjust.append(rule)
    return draft


def decide(out: Attribution, verdict: str) -> None:
    """Record `verdict` as the rule that decided whether `out` is slow; its cause rule is the top
    cause's when the answer names one."""
    rules = out.setdefault("rules", {"verdict": verdict, "cause": None, "adjust": []})
    rules["verdict"] = verdict
    if out["layer"] == "none":  # a healthy answer names no cause and keeps no adjustment
        rules["cause"] = None
        rules["adjust"] = []


def adjusted(out: Attribution, rule: str) -> None:
    """Record adjustment rule `rule` on the answer `out`."""
    rules = out.setdefault("rules", {"verdict": "", "cause": None, "adjust": []})
    if rule not in rules["adjust"]:
        rules["adjust"].append(rule)
