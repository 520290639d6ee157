"""Validated samples as columns: what ingest validation hands the writer (the writer's input type).

It lives with the database code so that the writer does not import the ingest package that calls it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(slots=True)
class SampleColumns:
    ts: npt.NDArray[np.float64]
    source: list[str]
    metric: list[str]
    value: npt.NDArray[np.float64]
    # Labels in canonical form, the series key the writer looks up: JSON with sorted keys, "" for none.
    # Built here, in the one pass that validates them, rather than in a second pass in the writer.
    label_keys: list[str]
    discontinuity: npt.NDArray[np.bool_] | None

    def __len__(self) -> int:
        return len(self.source)
