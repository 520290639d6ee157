"""A sustained episode's steps share its best-evidenced cause.

The sequential test (baseline.py) flags steps that are only a little slower than usual, because many
of them in a row are. Their own telemetry is then often as inconclusive as their timing: a throttled
checkpoint volume shows on the checkpoint step (its write straggles on one host) while the steps
after it are a few percent slower from the write-back, with nothing in their own windows that
stands out. Answering `unknown` for those would hide the episode rather than explain it. The steps
of one episode (`Baselines.episode`) are one event, so a step whose own evidence names nothing lists
the cause that the episode's best-evidenced step names, with lower confidence and an evidence row
(`kind: episode`) that says where the answer came from. A step that names a cause itself keeps it,
unless that cause is weak (`EngineConfig.episode_weak_confidence`) and the episode's, scaled down,
is still stronger: a switch port sampled every 6 s has no new sample in some 2-s steps of a
30-step link-error episode, and the faint pause of one NIC in such a step is noise next to the
symbol errors the episode showed for 20 steps. The step's own cause then follows the episode's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.constants import DEFAULT_CONFIG, EngineConfig
from fabricscope.service.correlate.records import Attribution, Cause, CauseDraft, named
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import caused


def best_cause(answers: Iterable[tuple[int, Any]]) -> tuple[int, dict[str, Any]] | None:
    """The episode's best-evidenced named cause over `(step, causes)` pairs (causes as stored: a list
    or its JSON): the highest confidence, then the most lost time, then the earliest step."""
    best: tuple[tuple[float, float, int], int, dict[str, Any]] | None = None
    for step, causes in answers:
        if isinstance(causes, str):
            causes = json.loads(causes)
        for c in causes or []:
            if not named(c.get("layer")) or c.get("component") is None:
                continue
            key = (float(c.get("confidence", 0.0)), float(c.get("lost_s", 0.0)), -int(step))
            if best is None or key > best[0]:
                best = (key, int(step), c)
    return None if best is None else (best[1], best[2])


def borrowed(
    out: Attribution, donor_step: int, donor: dict[str, Any], first_step: int, cfg: EngineConfig = DEFAULT_CONFIG
) -> CauseDraft:
    """The donor's cause for this step: its lost time, the donor's confidence scaled down (the step's
    own evidence did not confirm it), one evidence row naming the step it came from."""
    return {
        "layer": donor["layer"],
        "component": donor["component"],
        "rule": ids.CAUSE_EPISODE,
        "confidence": float(donor.get("confidence", 0.0)) * cfg.episode_confidence_factor,
        "lost_s": float(out["lost_s"]),
        "evidence": [
            {
                "source": str(donor["component"]),
                "metric": "episode_cause",
                "value": float(donor_step),
                "baseline": float(first_step),
                "score": round(float(donor.get("confidence", 0.0)), 3),
                "unit": "step",
                "kind": "episode",
            }
        ],
    }


def from_episode(
    conn: Any,
    out: Attribution,
    *,
    job: str,
    summ: pd.DataFrame,
    bl: Baselines,
    i: int,
    cfg: EngineConfig,
    attribute: Callable[[int], Attribution | None],
) -> None:
    """`out` (slow step `i` of `summ`, the job's step summaries, in an episode; its own evidence
    naming nothing) lists the cause that the episode's best-evidenced step names. The stored answers
    of the episode's other steps first; with none stored, those the per-step test flagged (they show
    the most) are attributed (`attribute`, which must not borrow in turn)."""
    steps, dur = summ["step"].to_numpy(int), summ["dur"].to_numpy(float)
    ep = [int(k) for k in np.flatnonzero(bl.episode == bl.episode[i]) if k != i]
    if not ep:
        return
    at = {int(steps[k]): k for k in ep}
    answers = [
        (int(r[0]), r[5])
        for r in q.stored_attributions(conn, job=job, lo=min(at), hi=max(at))
        if int(r[0]) in at and named(r[3])
    ]
    if not answers:
        lost = dur - bl.base
        worst = sorted((k for k in ep if bl.step_slow[k]), key=lambda k: -lost[k])[: cfg.episode_max_donors]
        for k in worst:
            a = attribute(int(steps[k]))
            if a is not None:
                answers.append((a["step"], a["causes"]))
    got = best_cause(answers)
    if got is None:
        return
    c = borrowed(out, got[0], got[1], int(steps[int(bl.episode[i])]), cfg)
    conf = round(float(min(max(c["confidence"], 0.0), cfg.max_confidence)), 3)  # as the engine caps its own
    if named(out["layer"]) and (c["component"] == out["component"] or conf <= out["confidence"]):
        return  # its own answer is the episode's, or stronger than the borrowed one
    first: Cause = {
        "layer": c["layer"],
        "component": c["component"],
        "lost_s": round(c["lost_s"], 6),
        "confidence": conf,
        "rule": ids.CAUSE_EPISODE,
    }
    own = [x for x in out["causes"] if named(x["layer"]) and x["component"] != c["component"]]
    if own:  # a weak own cause: the episode's takes the lost time it claimed, it keeps the rest
        first["lost_s"] = own[0]["lost_s"]
    out.update(
        {
            "layer": c["layer"],
            "component": c["component"],
            "confidence": conf,
            "evidence": c["evidence"] + out["evidence"],
            "causes": [first] + own,
        }
    )
    caused(out, ids.CAUSE_EPISODE)


def restate_unknown(rows: list[tuple[Any, ...]], episode: dict[int, int]) -> list[int]:
    """Stored steps (`rows` as queries.stored_attributions gives them) answered `unknown` whose episode
    (step -> its episode's first index, -1 none) has a step that names a cause now: re-attributed,
    they list it (background attribution judges steps in order, so the donor can come later)."""
    donors = {episode[int(r[0])] for r in rows if named(r[3]) and r[4] is not None and episode.get(int(r[0]), -1) >= 0}
    return [int(r[0]) for r in rows if r[1] and r[3] == "unknown" and episode.get(int(r[0]), -1) in donors]
