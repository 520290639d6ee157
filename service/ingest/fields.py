"""The field checks every ingest validator shares: limits, per-item error lists, timestamps, text,
job names and integers, each raising an IngestError that names the field."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from fabricscope.service import contract
from fabricscope.service.ingest.errors import IngestError, InvalidItems, TooLarge

MAX_TEXT = contract.MAX_TEXT
Loc = list[Any]


@dataclass(frozen=True, slots=True)
class Limits:
    max_batch: int
    min_ts: float
    max_ts: float


class ItemErrors:
    """The first error of each bad item of one batch, raised together once the batch is read."""

    def __init__(self) -> None:
        self.by_item: dict[int, IngestError] = {}

    def add(self, i: int, exc: IngestError) -> bool:
        """Record ``exc`` for item ``i``; True once the list is full (stop looking)."""
        self.by_item.setdefault(i, exc)
        return len(self.by_item) >= contract.MAX_ITEM_ERRORS

    def extend(self, found: Iterable[tuple[int, IngestError]]) -> None:
        for i, exc in found:
            if self.add(i, exc):
                return

    def raise_any(self) -> None:
        if self.by_item:
            errs = [self.by_item[i] for i in sorted(self.by_item)][:contract.MAX_ITEM_ERRORS]
            raise errs[0] if len(errs) == 1 else InvalidItems(errs)


def parse_ts(value: Any, loc: Loc) -> float:
    t = type(value)
    if t is float or t is int:
        return float(value)
    if t is str:
        try:
            dt = datetime.fromisoformat(value)
        except ValueError as exc:
            raise IngestError(loc, "not an RFC 3339 timestamp or Unix epoch seconds", "timestamp_parsing") from exc
        if dt.tzinfo is None:
            raise IngestError(loc, "timestamp has no time zone offset (use Z or +00:00)", "timestamp_parsing")
        return dt.timestamp()
    raise IngestError(loc, "must be an RFC 3339 string or Unix epoch seconds", "timestamp_type")


def text(value: Any, loc: Loc, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if type(value) is not str or len(value) < contract.MIN_TEXT:
        raise IngestError(loc, "must be a non-empty string", "string_type")
    if len(value) > MAX_TEXT:
        raise IngestError(loc, f"longer than {MAX_TEXT} characters", "string_too_long")
    if "\x00" in value:
        raise IngestError(loc, "must not contain NUL characters", "string_pattern_mismatch")
    return value


def job(value: Any, loc: Loc, *, required: bool = True) -> str | None:
    name = text(value, loc, required=required)
    if name is not None and not contract.JOB.match(name):
        raise IngestError(loc, "a job name is a URL path segment: no '/' or control characters, not '.' or '..'",
                          "string_pattern_mismatch")
    return name


def range_errors(ts: npt.NDArray[np.float64], limits: Limits, loc_of: Callable[[int], Loc],
                 index: list[int] | None = None) -> list[tuple[int, IngestError]]:
    """An error for each timestamp out of range; ``index`` maps positions to item numbers."""
    bad = np.flatnonzero((ts < limits.min_ts) | (ts > limits.max_ts) | ~np.isfinite(ts))
    out = []
    for j in bad[:contract.MAX_ITEM_ERRORS].tolist():
        i = index[j] if index is not None else j
        out.append((i, IngestError(loc_of(i), "timestamp out of range (before 2000 or too far in the future)",
                                   "timestamp_range")))
    return out


def items_of(body: Any, key: str, limits: Limits) -> list[Any]:
    if type(body) is not dict:
        raise IngestError(["body"], "must be a JSON object", "model_type")
    items = body.get(key)
    if type(items) is not list:
        raise IngestError(["body", key], "required: a list", "list_type")
    if len(items) > limits.max_batch:
        raise TooLarge(["body", key], f"{len(items)} items is over the limit of {limits.max_batch} per batch",
                       "too_long")
    return items


def batch_id(body: dict[str, Any]) -> str | None:
    b = body.get("batch_id")
    if b is None:
        return None
    return text(b, ["body", "batch_id"])


def job_name(body: dict[str, Any]) -> str:
    name = job(body.get("job"), ["body", "job"])
    assert name is not None
    return name


def integer(value: Any, loc: Loc, *, lo: int = contract.MIN_RANK, hi: int = contract.MAX_INT,
            required: bool = True) -> int | None:
    if value is None and not required:
        return None
    if type(value) is not int or value < lo or value > hi:
        raise IngestError(loc, f"must be an integer from {lo} to {hi}", "int_type")
    return value


def rank(value: Any, loc: Loc) -> int:
    r = integer(value, loc, hi=contract.MAX_INT32)
    assert r is not None
    return r
