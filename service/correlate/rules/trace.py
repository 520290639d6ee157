"""Writing rule ids into drafts and answers, so every answer can name the rules that decided it."""

from __future__ import annotations

from fabricscope.service.correlate.records import Attribution, CauseDraft, Rules


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


def _rules(out: Attribution) -> Rules:
    """`out`'s rules, made empty when it has none yet."""
    return out.setdefault("rules", {"verdict": "", "cause": None, "adjust": []})


def decide(out: Attribution, verdict: str) -> None:
    """Record `verdict` as the rule that decided whether `out` is slow; its cause rule is the top
    cause's when the answer names one."""
    rules = _rules(out)
    rules["verdict"] = verdict
    if out["layer"] == "none":  # a healthy answer names no cause and keeps no adjustment
        rules["cause"] = None
        rules["adjust"] = []


def adjusted(out: Attribution, rule: str) -> None:
    """Record adjustment rule `rule` on the answer `out`."""
    rules = _rules(out)
    if rule not in rules["adjust"]:
        rules["adjust"].append(rule)


def caused(out: Attribution, rule: str | None) -> None:
    """Record `rule` as the cause rule of `out`'s answer (it now heads another cause)."""
    _rules(out)["cause"] = rule
