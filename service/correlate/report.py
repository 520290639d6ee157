"""A job's report: time lost per layer and per component over stored attributions, worst first."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pandas as pd


def summarize(
    *, job: str, from_ts: datetime | None, to_ts: datetime | None, rows: Sequence[tuple[Any, ...]]
) -> dict[str, Any]:
    """`rows`: (step, slow, lost_s, layer, component, causes, ...) per stored attribution. A slow step's
    lost time is split over its causes; one stored without causes counts whole for its top layer."""
    out: dict[str, Any] = {
        "job": job,
        "from": from_ts.isoformat() if from_ts else None,
        "to": to_ts.isoformat() if to_ts else None,
        "steps": 0,
        "slow_steps": 0,
        "lost_s": 0.0,
        "layers": [],
        "components": [],
    }
    parts = []
    for step, slow, lost, layer, comp, causes, *_ in rows:
        if not slow:
            continue
        for c in causes or [{"layer": layer, "component": comp, "lost_s": lost}]:
            parts.append((step, c["layer"], c.get("component"), float(c.get("lost_s") or 0.0)))
    out["steps"] = len(rows)
    out["slow_steps"] = sum(1 for r in rows if r[1])
    if parts:
        df = pd.DataFrame(parts, columns=["step", "layer", "component", "lost_s"])
        out["lost_s"] = round(float(df["lost_s"].sum()), 6)
        lay = df.groupby("layer").agg(lost_s=("lost_s", "sum"), steps=("step", "nunique"))
        out["layers"] = [
            {"layer": k, "lost_s": round(float(v.lost_s), 6), "steps": int(v.steps)}
            for k, v in lay.sort_values("lost_s", ascending=False).iterrows()
        ]
        comp = (
            df.fillna({"component": ""})
            .groupby(["layer", "component"])
            .agg(lost_s=("lost_s", "sum"), steps=("step", "nunique"))
        )
        out["components"] = [
            {"component": k[1] or None, "layer": k[0], "lost_s": round(float(v.lost_s), 6), "steps": int(v.steps)}
            for k, v in comp.sort_values("lost_s", ascending=False).iterrows()
        ]
    return out
