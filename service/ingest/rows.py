"""Rows of steps, collectives and events (docs/API.md), validated item by item."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fabricscope.service import contract, freeform
from fabricscope.service.ingest import fields as f
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.ingest.fields import ItemErrors, Limits, Loc, parse_ts

NAME = contract.NAME


def _span(item: dict[str, Any], loc: Loc) -> tuple[float, float]:
    start = parse_ts(item.get("start"), [*loc, "start"])
    end = parse_ts(item.get("end"), [*loc, "end"])
    if end < start:
        raise IngestError([*loc, "end"], "end is before start", "value_error")
    return start, end


def job_rows(body: Any, kind: str, limits: Limits, row: Callable[[dict[str, Any], Loc], tuple[Any, ...]],
             start_at: int) -> list[tuple[Any, ...]]:
    """Rows of steps, collectives or events: ``row`` reads one item (IngestError naming its field);
    its start and end (or None) are at ``start_at`` and the next position, for the time-range check."""
    items = f.items_of(body, kind, limits)
    out: list[tuple[Any, ...]] = []
    index: list[int] = []
    errors = ItemErrors()
    for i, item in enumerate(items):
        loc: Loc = ["body", kind, i]
        try:
            if type(item) is not dict:
                raise IngestError(loc, "must be an object", "model_type")
            out.append(row(item, loc))
            index.append(i)
        except IngestError as exc:
            if errors.add(i, exc):
                errors.raise_any()
    starts = np.array([r[start_at] for r in out], dtype=np.float64)
    errors.extend(f.range_errors(starts, limits, lambda i: ["body", kind, i, "start"], index))
    ends = [r[start_at + 1] for r in out]
    end_at = [j for j, e in enumerate(ends) if e is not None] if None in ends else range(len(ends))
    errors.extend(f.range_errors(np.array([ends[j] for j in end_at], dtype=np.float64), limits,
                                 lambda i: ["body", kind, i, "end"], [index[j] for j in end_at]))
    errors.raise_any()
    return out


def _step(s: dict[str, Any], loc: Loc) -> tuple[Any, ...]:
    r = f.rank(s.get("rank"), [*loc, "rank"])
    step = f.integer(s.get("step"), [*loc, "step"])
    start, end = _span(s, loc)
    phases = s.get("phases")
    if phases is not None:
        if type(phases) is not dict:
            raise IngestError([*loc, "phases"], "must be an object of seconds", "dict_type")
        for k, v in phases.items():
            if (type(v) is not float and type(v) is not int) or v < contract.MIN_PHASE_S or v != v:
                raise IngestError([*loc, "phases", k], "must be a number of seconds >= 0", "float_type")
        # The values are plain numbers (checked above): only the keys and the size are left, and a
        # JSON key is at most 6 bytes a character.
        keys = "".join(phases)
        if "\x00" in keys or 6 * len(keys) + 32 * len(phases) > contract.MAX_OBJECT_BYTES:
            why = freeform.problem(phases)
            if why is not None:
                raise IngestError([*loc, "phases"], why, "value_error")
    return (r, step, start, end, phases)


def steps(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    return job_rows(body, "steps", limits, _step, 2)


def _collective(c: dict[str, Any], loc: Loc) -> tuple[Any, ...]:
    r = f.rank(c.get("rank"), [*loc, "rank"])
    step = f.integer(c.get("step"), [*loc, "step"], required=False)
    seq = f.integer(c.get("seq"), [*loc, "seq"], required=False)
    op = f.text(c.get("op"), [*loc, "op"])
    nbytes = f.integer(c.get("bytes"), [*loc, "bytes"], required=False)
    start, end = _span(c, loc)
    group = f.text(c.get("group"), [*loc, "group"], required=False)
    gsize = f.integer(c.get("group_size"), [*loc, "group_size"], lo=contract.MIN_GROUP_SIZE, hi=contract.MAX_INT32,
                 required=False)
    return (r, step, seq, op, nbytes, start, end, group, gsize)


def collectives(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    return job_rows(body, "collectives", limits, _collective, 5)


def _event(e: dict[str, Any], loc: Loc) -> tuple[Any, ...]:
    kind = f.text(e.get("kind"), [*loc, "kind"])
    if kind is not None and not NAME.match(kind):
        raise IngestError([*loc, "kind"], "must be snake_case ([a-z][a-z0-9_]*)", "string_pattern_mismatch")
    source = f.text(e.get("source"), [*loc, "source"])
    job_ = f.job(e.get("job"), [*loc, "job"], required=False)
    start = parse_ts(e.get("start"), [*loc, "start"])
    end = None
    if e.get("end") is not None:
        end = parse_ts(e.get("end"), [*loc, "end"])
        if end < start:
            raise IngestError([*loc, "end"], "end is before start", "value_error")
    attrs = e.get("attrs")
    if attrs is None:
        attrs = {}
    elif type(attrs) is not dict:
        raise IngestError([*loc, "attrs"], "must be an object", "dict_type")
    elif attrs:
        why = freeform.problem(attrs)
        if why is not None:
            raise IngestError([*loc, "attrs"], why, "value_error")
    return (kind, source, job_, start, end, attrs)


def events(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    return job_rows(body, "events", limits, _event, 3)
