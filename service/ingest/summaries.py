"""Per-step collective summaries (``POST /v1/ingest/collective_summaries``, #45 item 3): validated item by
item (a 422 names the field), written with COPY into ``collective_summaries`` in the batch's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

from fabricscope.service import contract
from fabricscope.service.db.copybin import iso_utc
from fabricscope.service.ingest import fields as f
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.ingest.fields import Limits, Loc
from fabricscope.service.ingest.rows import job_rows

KIND = "collective_summaries"


def _seconds(value: Any, loc: Loc) -> float:
    if (type(value) is not float and type(value) is not int) or not 0 <= value < float("inf"):
        raise IngestError(loc, "must be a finite number of seconds >= 0", "float_type")
    return float(value)


def _bucket(value: Any, loc: Loc) -> int:
    b = f.integer(value, loc)
    assert b is not None
    if b and b & (b - 1) or (b & 0x5555555555555555) != b:  # 0, or a power of 4
        raise IngestError(loc, "must be 0 or a power of 4 (the largest at or below the bytes)", "value_error")
    return b


def _summary(s: dict[str, Any], loc: Loc) -> tuple[Any, ...]:
    r = f.rank(s.get("rank"), [*loc, "rank"])
    step = f.integer(s.get("step"), [*loc, "step"])
    op = f.text(s.get("op"), [*loc, "op"])
    bucket = _bucket(s.get("bucket"), [*loc, "bucket"])
    gsize = f.integer(s.get("group_size"), [*loc, "group_size"], lo=contract.MIN_GROUP_SIZE, hi=contract.MAX_INT32,
                      required=False)
    count = f.integer(s.get("count"), [*loc, "count"], lo=1)
    total = _seconds(s.get("total_s"), [*loc, "total_s"])
    mx = _seconds(s.get("max_s"), [*loc, "max_s"])
    if mx > total * (1 + 1e-9) + 1e-12:
        raise IngestError([*loc, "max_s"], "is more than total_s", "value_error")
    nbytes = f.integer(s.get("bytes"), [*loc, "bytes"], required=False)
    group = f.text(s.get("slowest_group"), [*loc, "slowest_group"], required=False)
    seq = f.integer(s.get("slowest_seq"), [*loc, "slowest_seq"], required=False)
    start = f.parse_ts(s.get("start"), [*loc, "start"])
    end = f.parse_ts(s.get("end"), [*loc, "end"])
    if end < start:
        raise IngestError([*loc, "end"], "end is before start", "value_error")
    return (r, step, op, bucket, gsize or 0, count, total, mx, nbytes, group, seq, start, end)


def summaries(body: Any, limits: Limits) -> list[tuple[Any, ...]]:
    return job_rows(body, KIND, limits, _summary, 11)


def write_summaries(conn: psycopg.Connection, *, job: str, rows: Sequence[tuple[Any, ...]]) -> int:
    if not rows:
        return 0
    starts = iso_utc(np.array([r[11] for r in rows]))
    ends = iso_utc(np.array([r[12] for r in rows]))
    with conn.cursor() as cur, cur.copy(
        "COPY collective_summaries (job, rank, step, op, bucket, group_size, count, total_s, max_s, bytes,"
        " slowest_group, slowest_seq, start_ts, end_ts) FROM STDIN"
    ) as cp:
        for row, s, e in zip(rows, starts, ends, strict=True):
            cp.write_row((job, *row[:11], s, e))
    return len(rows)
