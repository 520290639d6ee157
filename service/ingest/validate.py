"""Turn docs/API.md ingest bodies into column arrays, naming every offending item on bad input.

This is the hot path of HTTP ingest (tens of thousands of rows per request), so it is one tight loop
per row with ``type(x) is`` checks and no per-row model objects; everything after it is numpy.
A bad item does not stop the loop: the 422 lists each bad item (its first error, up to
``contract.MAX_ITEM_ERRORS``), so a sender can resend the batch without exactly those items.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from fabricscope.service import contract, freeform
from fabricscope.service.db.columns import SampleColumns
from fabricscope.service.ingest import fields as f
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.ingest.fields import ItemErrors, Limits, batch_id, job_name, parse_ts
from fabricscope.service.ingest.rows import collectives, events, steps

NAME = contract.NAME
MAX_TEXT = contract.MAX_TEXT

__all__ = ["Limits", "SampleColumns", "batch_id", "check_columns", "collectives", "events", "job_name", "labels_key",
           "parse_ts", "samples", "steps"]


def samples(body: Any, limits: Limits) -> SampleColumns:
    items = f.items_of(body, "samples", limits)
    n = len(items)
    ts = np.empty(n, dtype=np.float64)
    val = np.empty(n, dtype=np.float64)
    sources: list[str] = [""] * n
    metrics: list[str] = [""] * n
    label_keys: list[str] = [""] * n
    disc: list[int] = []
    good_names: set[str] = set()
    errors = ItemErrors()
    for i, s in enumerate(items):
        try:
            if type(s) is not dict:
                raise IngestError(["body", "samples", i], "must be an object", "model_type")
            t = s.get("ts")
            tt = type(t)
            ts[i] = t if (tt is float or tt is int) else parse_ts(t, ["body", "samples", i, "ts"])
            src = s.get("source")
            if type(src) is not str or not contract.MIN_TEXT <= len(src) <= MAX_TEXT:
                f.text(src, ["body", "samples", i, "source"])
            sources[i] = src  # type: ignore[assignment]  # checked just above (NUL: on the column)
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
        except IngestError as exc:
            if errors.add(i, exc):
                errors.raise_any()
            ts[i], val[i], sources[i] = limits.min_ts, 0.0, ""  # so the column checks pass over it
    errors.extend(column_errors(ts, val, sources, limits))
    errors.raise_any()
    d = None
    if disc:
        d = np.zeros(n, dtype=bool)
        d[disc] = True
    return SampleColumns(ts, sources, metrics, val, label_keys, d)


def column_errors(ts: npt.NDArray[np.float64], val: npt.NDArray[np.float64], sources: list[str],
                  limits: Limits) -> list[tuple[int, IngestError]]:
    """The checks of a samples batch done on whole columns: time range, finite values, NUL in sources."""
    out = f.range_errors(ts, limits, lambda i: ["body", "samples", i, "ts"])
    for i in np.flatnonzero(~np.isfinite(val))[:contract.MAX_ITEM_ERRORS].tolist():
        out.append((i, IngestError(["body", "samples", i, "value"], "must be a finite number", "finite_number")))
    if any("\x00" in s for s in set(sources)):
        out.extend((i, IngestError(["body", "samples", i, "source"], "must not contain NUL characters",
                                   "string_pattern_mismatch")) for i, s in enumerate(sources) if "\x00" in s)
    return sorted(out, key=lambda e: e[0])


def check_columns(ts: npt.NDArray[np.float64], val: npt.NDArray[np.float64], sources: list[str],
                  limits: Limits) -> None:
    errors = ItemErrors()
    errors.extend(column_errors(ts, val, sources, limits))
    errors.raise_any()


def labels_key(lab: Any, i: int = 0) -> str:
    """Validate one sample's labels and return their canonical form (sorted-key JSON; "" when empty)."""
    loc = ["body", "samples", i, "labels"]
    if type(lab) is not dict:
        raise IngestError(loc, "must be an object of string values", "dict_type")
    if not lab:
        return ""
    if len(lab) > contract.MAX_LABELS:
        raise IngestError(loc, f"{len(lab)} labels is over the limit of {contract.MAX_LABELS} per sample",
                          "too_long")
    for k, v in lab.items():
        if not contract.LABEL_KEY.match(k):
            raise IngestError([*loc, k], "label names are [A-Za-z_][A-Za-z0-9_]*", "string_pattern_mismatch")
        if type(v) is str:
            if len(v) > contract.LABEL_VALUE_MAX_LEN:
                raise IngestError([*loc, k], f"label values are at most {contract.LABEL_VALUE_MAX_LEN} characters",
                                  "string_too_long")
            if "\x00" in v:
                raise IngestError([*loc, k], "label values must not contain NUL characters", "string_pattern_mismatch")
        elif type(v) is int and contract.MIN_INT <= v <= contract.MAX_INT:
            lab = {**lab, k: str(v)}  # {"priority": 3} is common; store it as the string it means
        else:
            raise IngestError([*loc, k], "label values must be strings (or integers of 64 bits)", "string_type")
    key = orjson.dumps(lab, option=orjson.OPT_SORT_KEYS)
    why = freeform.labels_size_problem(key)
    if why is not None:
        raise IngestError(loc, why, "too_long")
    return key.decode()


