"""The shapes the engine returns, as TypedDicts mirroring `service.schemas.Attribution` (docs/API.md).

tests/correlate/test_records.py checks that every key here exists in the pydantic models with a
compatible type, so the HTTP response never silently drops a field the engine computes.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

NAMELESS = ("none", "unknown")  # the layers of an answer that names no cause


def named(layer: Any) -> bool:
    return isinstance(layer, str) and layer not in NAMELESS


class EvidenceRow(TypedDict):
    source: str  # the telemetry source (`leaf1:Ethernet12`) or, for a timing, `host:gpu` / `host`
    metric: str
    value: float
    baseline: float
    score: float
    unit: str  # per_second (counter rate), value (gauge), seconds (a timing) or events (XIDs)
    labels: NotRequired[dict[str, str]]  # the series' labels, when it has any
    rank: NotRequired[int]  # timing evidence: the straggling rank
    # "timing" for a rank's phase time, "event" for a logged event (a GPU XID), "episode" for a cause
    # borrowed from the step's episode, "corroborated" for a step its telemetry made slow, "onset"
    # for an episode's first step that showed nothing of its own and is not slow, "untimed" for a step
    # only the sequential test flagged whose network cause its own collectives did not show (not slow)
    kind: NotRequired[str]
    rule: NotRequired[str]  # a `corroborated` row: the promotion rule that made the step slow (rules/ids.py)


class Cause(TypedDict):
    """One cause as listed in an attribution's `causes`."""

    layer: str
    component: str | None
    lost_s: float
    confidence: float
    rule: NotRequired[str]  # the cause rule that named it (rules/ids.py)


class Rules(TypedDict):
    """Which rules decided an answer (rules/catalogue.py): the verdict's, the top cause's (None when
    the step names none) and the adjustments that changed the answer, in the order applied."""

    verdict: str
    cause: str | None
    adjust: list[str]


class CauseDraft(TypedDict):
    """A cause while it is being built: its evidence is still attached, lost time set when combined."""

    layer: str
    component: str | None
    confidence: float
    evidence: list[EvidenceRow]
    lost_s: NotRequired[float]
    rule: NotRequired[str]  # the cause rule that built it
    adjust: NotRequired[list[str]]  # adjustment rules applied to it, in order


class Attribution(TypedDict):
    step: int
    slow: bool
    duration_s: float
    baseline_s: float | None  # None until the job has enough history
    start: str | None  # RFC 3339
    layer: str  # none | compute | host | nic | link | fabric | storage | unknown
    component: str | None
    confidence: float
    lost_s: float
    evidence: list[EvidenceRow]
    causes: list[Cause]
    rules: NotRequired[Rules]


class StepRow(TypedDict):
    step: int
    start: str | None
    duration_s: float
    baseline_s: float | None
    slow: bool
    verdict: str | None  # the rule that judged it (rules/ids.py); None: not judged yet, `slow` the baseline's
