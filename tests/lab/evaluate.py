"""Score the engine's answers against the lab's ground truth (pure: steps, attributions, windows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# step -> the stored answers as the lab saw them (tests/lab/stored.py): (wall time seen, layer, component)
History = dict[int, list[tuple[float, str, str | None]]]


def first_right(history: History, step: int, layers: tuple[str, ...], component: str) -> float | None:
    """When the lab first saw a stored answer for `step` with a right layer and the component."""
    return next((t for t, layer, comp in history.get(step, []) if layer in layers and comp == component), None)


@dataclass
class Window:
    fault: str
    what: str
    start: float
    end: float
    layers: tuple[str, ...]  # correct layers (the first is the injected one)
    component: str


@dataclass
class FaultResult:
    fault: str
    what: str
    layer: str
    component: str
    steps_affected: int = 0
    slow: int = 0
    layer_ok: int = 0
    component_ok: int = 0
    in_causes: int = 0  # the right (layer, component) is among the engine's listed causes
    first_attribution_s: float | None = None
    answers: list[tuple[int, str, str | None]] = field(default_factory=list)
    # the whole answer (causes, evidence, timings) of each slow step whose top answer was wrong: what
    # a failed CI run leaves to read once the lab and its database are gone
    wrong: list[dict[str, Any]] = field(default_factory=list)

    @property
    def detected(self) -> bool:
        return self.slow > 0

    def row(self) -> list[str]:
        pct = (lambda n: f"{n}/{self.slow}") if self.slow else (lambda n: "-")
        t = "-" if self.first_attribution_s is None else f"{self.first_attribution_s:.1f} s"
        return [self.fault, str(self.steps_affected), f"{'yes' if self.detected else 'no'} ({self.slow} slow)",
                pct(self.layer_ok), pct(self.component_ok), pct(self.in_causes), t]


def _overlaps(s: dict[str, Any], lo: float, hi: float) -> bool:
    return s["t0"] < hi and s["t0"] + s["duration_s"] > lo


def evaluate(steps: list[dict[str, Any]], attributions: dict[int, dict[str, Any]], windows: list[Window],
             first_seen: dict[int, float], *, grace_s: float, judged_from: float,
             stored: History | None = None) -> tuple[list[FaultResult], list[int]]:
    """Per fault: steps overlapping its window, how many were slow, how many of those the engine
    put on the right layer / component, and how long after the fault started the first right
    answer was available (``first_seen``: step -> wall time its attribution was first fetched).
    With ``stored`` (the answers the service's background worker stored, as the lab saw them,
    tests/lab/stored.py) that time is when a slow step's stored answer was first right instead.
    Also the slow steps outside every window widened by ``grace_s`` (false alarms)."""
    results = []
    for w in windows:
        r = FaultResult(w.fault, w.what, w.layers[0], w.component)
        for s in steps:
            if not _overlaps(s, w.start, w.end):
                continue
            r.steps_affected += 1
            if not s["slow"]:
                continue
            r.slow += 1
            a = attributions.get(s["step"], {})
            lay_ok = a.get("layer") in w.layers
            comp_ok = a.get("component") == w.component
            r.layer_ok += lay_ok
            r.component_ok += comp_ok
            r.in_causes += any(c.get("layer") in w.layers and c.get("component") == w.component
                               for c in a.get("causes") or [])
            r.answers.append((s["step"], str(a.get("layer")), a.get("component")))
            if not (lay_ok and comp_ok):
                r.wrong.append(a)
            if stored is not None:
                seen = first_right(stored, s["step"], w.layers, w.component)
            else:
                seen = first_seen.get(s["step"]) if lay_ok and comp_ok else None
            if seen is not None:
                dt = max(seen - w.start, 0.0)
                r.first_attribution_s = dt if r.first_attribution_s is None else min(r.first_attribution_s, dt)
        results.append(r)
    outside = [s["step"] for s in steps if s["slow"] and s["t0"] >= judged_from
               and not any(_overlaps(s, w.start - grace_s, w.end + grace_s) for w in windows)]
    return results, outside


HEADER = ["fault", "steps affected", "detected", "layer correct", "component correct",
          "right cause listed", "time to first attribution"]


def table(results: list[FaultResult]) -> str:
    rows = [HEADER, ["---"] * len(HEADER)] + [r.row() for r in results]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)
