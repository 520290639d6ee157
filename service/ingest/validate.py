"""Turn docs/API.md ingest bodies into column arrays, naming the first offending field on bad input.

This is the hot path of HTTP ingest (tens of thousands of rows per request), so it is one tight loop
per row with ``type(x) is`` checks and no per-row model objects; everything after it is numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from fabricscope.service import contract
from fabricscope.service.db.columns import SampleColumns
from fabricscope.service.ingest.errors import IngestError, TooLarge

NAME = contract.NAME
MAX_TEXT = contract.MAX_TEXT


@dataclass(frozen=True, slots=True)
class Limits:
    max_batch: int
    min_ts: float
    max_ts: float


def parse_ts(value: Any, loc: list[Any]) -> float:
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


def _text(value: Any, loc: list[Any], *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if type(value) is not str or len(value) < contract.MIN_TEXT:
        raise IngestError(loc, "must be a non-empty string", "string_type")
    if len(value) > MAX_TEXT:
        raise IngestError(loc, f"longer than {MAX_TEXT} characters", "string_too_long")
    return value


def _check_range(ts: npt.NDArray[np.float64], limits: Limits, loc_of: Any) -> None:
    bad = (ts < limits.min_ts) | (ts > limits.max_ts) | ~np.isfinite(ts)
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(loc_of(i), "timestamp out of range (before 2000 or too far in the future)",
                          "timestamp_range")


def _items(body: Any, key: str, limits: Limits) -> list[Any]:
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
    return _text(b, ["body", "batch_id"])


def job_name(body: dict[str, Any]) -> str:
    job = _text(body.get("job"), ["body", "job"])
    assert job is not None
    return job


def samples(body: Any, limits: Limits) -> SampleColumns:
    items = _items(body, "samples", limits)
    n = len(items)
    ts = np.empty(n, dtype=np.float64)
    val = np.empty(n, dtype=np.float64)
    sources: list[str] = [""] * n
    metrics: list[str] = [""] * n
    label_keys: list[str] = [""] * n
    disc: list[int] = []
    good_names: set[str] = set()
    for i, s in enumerate(items):
        if type(s) is not dict:
            raise IngestError(["body", "samples", i], "must be an object", "model_type")
        t = s.get("ts")
        tt = type(t)
        ts[i] = t if (tt is float or tt is int) else parse_ts(t, ["body", "samples", i, "ts"])
        src = s.get("source")
        if type(src) is not str or not contract.MIN_TEXT <= len(src) <= MAX_TEXT:
            _text(src, ["body", "samples", i, "source"])
        sources[i] = src  # type: ignore[assignment]  # checked just above
        m = s.get("metric")
        if type(m) is not str or m not in good_names:
            if type(m) is not str or not NAME.match(m):
                raise IngestError(["body", "samples", i, "metric"],
                                  "must be a snake_case metric name ([a-z][a-z0-9_]*)", "string_pattern_mismatch")
            good_names.add(m)
        metrics[i] = m
        v = s.get("value")
        vt = type(v)
        if vt is not float and vt is not int:
            raise IngestError(["body", "samples", i, "value"], "must be a number", "float_type")
        val[i] = v
        lab = s.get("labels")
        if lab is not None:
            label_keys[i] = labels_key(lab, i)
        if s.get("discontinuity") is True:
            disc.append(i)
    check_columns(ts, val, limits)
    d = None
    if disc:
        d = np.zeros(n, dtype=bool)
        d[disc] = True
    return SampleColumns(ts, sources, metrics, val, label_keys, d)


def check_columns(ts: npt.NDArray[np.float64], val: npt.NDArray[np.float64], limits: Limits) -> None:
    """The checks of a samples batch that are done on whole columns: time range, finite values."""
    _check_range(ts, limits, lambda i: ["body", "samples", i, "ts"])
    if not np.isfinite(val).all():
        i = int(np.argmax(~np.isfinite(val)))
        raise IngestError(["body", "samples", i, "value"], "must be a finite number", "finite_number")


def labels_key(lab: Any, i: int = 0) -> str:
    """Validate one sample's labels and return their canonical form (sorted-key JSON; "" when empty)."""
    loc = ["body", "samples", i, "labels"]
    if type(lab) is not dict:
        raise IngestError(loc, "must be an object of string values", "dict_type")
    if not lab:
        return ""
    for k, v in lab.items():
        if not contract.LABEL_KEY.match(k):
            raise IngestError([*loc, k], "label names are [A-Za-z_][A-Za-z0-9_]*", "string_pattern_mismatch")
        if type(v) is not str:
            if type(v) is int:  # {"priority": 3} is common; store it as the string it means
                lab = {**lab, k: str(v)}
                continue
            raise IngestError([*loc, k], "label values must be strings", "string_type")
    return orjson.dumps(lab, option=orjson.OPT_SORT_KEYS).decode()


def _int(value: Any, loc: list[Any], *, lo: int = contract.MIN_RANK, required: bool = True) -> int | None:
    if value is None and not required:
        return None
    if type(value) is not int or value < lo or value > contract.MAX_INT:
        raise IngestError(loc, f"must be an integer >= {lo}", "int_type")
    return value


def _span(item: dict[str, Any], loc: list[Any]) -> tuple[float, float]:
    start = parse_ts(item.get("start"), [*loc, "start"])
    end = parse_ts(item.get("end"), [*loc, "end"])
    if end < start:
        raise IngestError([*loc, "end"], "end is before start", "value_error")
    return start, end


def steps(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    items = _items(body, "steps", limits)
    out: list[tuple[Any, ...]] = []
    for i, s in enumerate(items):
        loc: list[Any] = ["body", "steps", i]
        if type(s) is not dict:
            raise IngestError(loc, "must be an object", "model_type")
        rank = _int(s.get("rank"), [*loc, "rank"])
        step = _int(s.get("step"), [*loc, "step"])
        start, end = _span(s, loc)
        phases = s.get("phases")
        if phases is not None:
            if type(phases) is not dict:
                raise IngestError([*loc, "phases"], "must be an object of seconds", "dict_type")
            for k, v in phases.items():
                if (type(v) is not float and type(v) is not int) or v < contract.MIN_PHASE_S or v != v:
                    raise IngestError([*loc, "phases", k], "must be a number of seconds >= 0", "float_type")
        out.append((rank, step, start, end, phases))
    _check_range(np.array([r[2] for r in out], dtype=np.float64), limits, lambda i: ["body", "steps", i, "start"])
    return out


def collectives(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    items = _items(body, "collectives", limits)
    out: list[tuple[Any, ...]] = []
    for i, c in enumerate(items):
        loc: list[Any] = ["body", "collectives", i]
        if type(c) is not dict:
            raise IngestError(loc, "must be an object", "model_type")
        rank = _int(c.get("rank"), [*loc, "rank"])
        step = _int(c.get("step"), [*loc, "step"], required=False)
        seq = _int(c.get("seq"), [*loc, "seq"], required=False)
        op = _text(c.get("op"), [*loc, "op"])
        nbytes = _int(c.get("bytes"), [*loc, "bytes"], required=False)
        start, end = _span(c, loc)
        group = _text(c.get("group"), [*loc, "group"], required=False)
        gsize = _int(c.get("group_size"), [*loc, "group_size"], lo=contract.MIN_GROUP_SIZE, required=False)
        out.append((rank, step, seq, op, nbytes, start, end, group, gsize))
    _check_range(np.array([r[5] for r in out], dtype=np.float64), limits,
                 lambda i: ["body", "collectives", i, "start"])
    return out


def events(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    items = _items(body, "events", limits)
    out: list[tuple[Any, ...]] = []
    for i, e in enumerate(items):
        loc: list[Any] = ["body", "events", i]
        if type(e) is not dict:
            raise IngestError(loc, "must be an object", "model_type")
        kind = _text(e.get("kind"), [*loc, "kind"])
        if kind is not None and not NAME.match(kind):
            raise IngestError([*loc, "kind"], "must be snake_case ([a-z][a-z0-9_]*)", "string_pattern_mismatch")
        source = _text(e.get("source"), [*loc, "source"])
        job = _text(e.get("job"), [*loc, "job"], required=False)
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
        out.append((kind, source, job, start, end, attrs))
    _check_range(np.array([r[3] for r in out], dtype=np.float64), limits, lambda i: ["body", "events", i, "start"])
    return out
