"""Samples as sorted plain rows, the form of the fixtures' expected.json files."""

from __future__ import annotations

from typing import Any

from fabricscope.core.model import Sample


def canon(samples: list[Sample]) -> list[dict[str, Any]]:
    rows = []
    for s in samples:
        row: dict[str, Any] = {"source": s.source, "metric": s.metric, "value": round(s.value, 9)}
        if s.labels:
            row["labels"] = dict(s.labels)
        rows.append(row)
    return sorted(rows, key=lambda r: (r["source"], r["metric"], sorted(r.get("labels", {}).items())))
