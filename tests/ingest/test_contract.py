"""The three ingest validators (pydantic models, msgspec fast path, reference loop) agree on every
constraint of ``service.contract``: a value just inside a bound is taken by all of them, a
value just outside is refused by all of them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from fabricscope.service import contract as c
from fabricscope.service.ingest import fast
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.body import decode_body
from fabricscope.service.ingest.errors import IngestError
from fabricscope.service.schemas import INGEST_MODELS
from fabricscope.service.settings import Settings

LIMITS = v.Limits(max_batch=50, min_ts=c.MIN_TS, max_ts=time.time() + c.MAX_FUTURE_S)
T = 1.7e9
ROW: dict[str, dict[str, Any]] = {
    "samples": {"ts": T, "source": "leaf1:Ethernet1", "metric": "rx_bytes_total", "value": 1.0},
    "steps": {"rank": 0, "step": 1, "start": T, "end": T + 1},
    "collectives": {"rank": 0, "op": "allreduce", "start": T, "end": T + 1},
    "events": {"kind": "pfc_storm", "source": "leaf1:Ethernet1", "start": T},
}
REFERENCE = {"samples": v.samples, "steps": v.steps, "collectives": v.collectives, "events": v.events}

NAME_MAX = "n" * c.NAME_MAX_LEN
KEY_MAX = "k" * c.LABEL_KEY_MAX_LEN
TEXT_MAX = "x" * c.MAX_TEXT
VALUE_MAX = "v" * c.LABEL_VALUE_MAX_LEN


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` containers deep ({} is 1)."""
    out: dict[str, Any] = {}
    for _ in range(depth - 1):
        out = {"a": out}
    return out


def labels_of_size(n_bytes: int) -> dict[str, str]:
    """Labels whose canonical JSON is exactly ``n_bytes`` long: 8 pairs ``"kN":"v..."``."""
    values = [c.LABEL_VALUE_MAX_LEN - 6] * 8
    values[-1] = n_bytes - (2 + 7 + 8 * 7 + sum(values[:-1]))
    assert 0 < values[-1] <= c.LABEL_VALUE_MAX_LEN
    return {f"k{i}": "v" * n for i, n in enumerate(values)}


def sized(n_bytes: int) -> dict[str, Any]:
    """A free-form object of exactly ``n_bytes`` as compact JSON: ``{"s":"x..."}``."""
    return {"s": "x" * (n_bytes - 8)}

# (kind, where the value goes: "row.<field>", "row.labels" (as a key) or "body.<field>", inside, outside)
CASES: list[tuple[str, str, Any, Any]] = [
    ("samples", "row.metric", NAME_MAX, NAME_MAX + "n"),
    ("samples", "row.metric", "rx_bytes_total", "rx_bytes_total\n"),
    ("samples", "row.metric", "rx", "Rx"),
    ("samples", "row.metric", "r2", "2r"),
    ("samples", "row.source", "x" * c.MIN_TEXT, "x" * (c.MIN_TEXT - 1)),
    ("samples", "row.source", TEXT_MAX, TEXT_MAX + "x"),
    ("samples", "body.batch_id", "x" * c.MIN_TEXT, "x" * (c.MIN_TEXT - 1)),
    ("samples", "body.batch_id", TEXT_MAX, TEXT_MAX + "x"),
    ("samples", "row.labels", KEY_MAX, KEY_MAX + "k"),
    ("samples", "row.labels", "_queue", "1queue"),
    ("samples", "row.labels", "queue", "queue\n"),
    ("samples", "row.label_value", VALUE_MAX, VALUE_MAX + "v"),
    ("samples", "row.label_value", "a b", "a\x00b"),
    ("samples", "row.label_value", c.MAX_INT, c.MAX_INT + 1),
    ("samples", "row.label_value", c.MIN_INT, c.MIN_INT - 1),
    ("samples", "row.label_set", {f"l{i}": "1" for i in range(c.MAX_LABELS)},
     {f"l{i}": "1" for i in range(c.MAX_LABELS + 1)}),
    ("samples", "row.label_set", labels_of_size(c.LABELS_MAX_BYTES), labels_of_size(c.LABELS_MAX_BYTES + 1)),
    ("samples", "row.source", "leaf1:Ethernet1", "leaf1\x00:Ethernet1"),
    ("events", "row.kind", NAME_MAX, NAME_MAX + "n"),
    ("events", "row.kind", "pfc_storm", "pfc_storm\n"),
    ("events", "row.source", TEXT_MAX, TEXT_MAX + "x"),
    ("events", "row.job", "x" * c.MIN_TEXT, "x" * (c.MIN_TEXT - 1)),
    ("events", "row.job", TEXT_MAX, TEXT_MAX + "x"),
    ("events", "body.batch_id", TEXT_MAX, TEXT_MAX + "x"),
    ("events", "row.job", "team-a", "team/a"),
    ("events", "row.job", "...", ".."),
    ("events", "row.job", ".a", "."),
    ("events", "row.source", "leaf1", "leaf\x001"),
    ("events", "row.attrs", nested(c.MAX_DEPTH), nested(c.MAX_DEPTH + 1)),
    ("events", "row.attrs", sized(c.MAX_OBJECT_BYTES), sized(c.MAX_OBJECT_BYTES + 1)),
    ("events", "row.attrs", {"k": "v"}, {"k\x00": "v"}),
    ("events", "row.attrs", {"k": ["a"]}, {"k": ["a\x00"]}),
    ("steps", "row.rank", c.MIN_RANK, c.MIN_RANK - 1),
    ("steps", "row.rank", c.MAX_INT32, c.MAX_INT32 + 1),
    ("steps", "row.step", c.MAX_INT, c.MAX_INT + 1),
    ("steps", "row.step", c.MIN_RANK, c.MIN_RANK - 1),
    ("steps", "row.phases", {"forward": c.MIN_PHASE_S}, {"forward": c.MIN_PHASE_S - 0.001}),
    ("steps", "body.job", TEXT_MAX, TEXT_MAX + "x"),
    ("steps", "body.job", "x" * c.MIN_TEXT, "x" * (c.MIN_TEXT - 1)),
    ("steps", "body.job", "team-a", "team/a"),
    ("steps", "body.job", "a", "a\n"),
    ("steps", "row.phases", {"forward": 1.0}, {"forward\x00": 1.0}),
    ("collectives", "row.op", TEXT_MAX, TEXT_MAX + "x"),
    ("collectives", "row.op", "x" * c.MIN_TEXT, "x" * (c.MIN_TEXT - 1)),
    ("collectives", "row.group", TEXT_MAX, TEXT_MAX + "x"),
    ("collectives", "row.seq", c.MIN_RANK, c.MIN_RANK - 1),
    ("collectives", "row.bytes", c.MAX_INT, c.MAX_INT + 1),
    ("collectives", "row.group_size", c.MIN_GROUP_SIZE, c.MIN_GROUP_SIZE - 1),
    ("collectives", "row.group_size", c.MAX_INT32, c.MAX_INT32 + 1),
    ("collectives", "row.rank", c.MAX_INT32, c.MAX_INT32 + 1),
    ("collectives", "row.op", "all_reduce", "all\x00reduce"),
    ("collectives", "body.job", "team-a", "team/a"),
    ("collectives", "body.batch_id", TEXT_MAX, TEXT_MAX + "x"),
]


def _body(kind: str, where: str, value: Any) -> bytes:
    row = dict(ROW[kind])
    body: dict[str, Any] = {kind: [row]}
    if kind in ("steps", "collectives"):
        body["job"] = "train-1"
    scope, _, name = where.partition(".")
    if name == "labels":
        row["labels"] = {value: "3"}
    elif name == "label_value":
        row["labels"] = {"queue": value}
    elif name == "label_set":
        row["labels"] = value
    elif scope == "row":
        row[name] = value
    else:
        body[name] = value
    return json.dumps(body).encode()  # not orjson: it refuses the ints past 64 bits a client may send


def _pydantic(kind: str, raw: bytes) -> bool:
    model: type[BaseModel] = INGEST_MODELS[kind]
    try:
        model.model_validate_json(raw)
    except ValidationError:
        return False
    return True


def _reference(kind: str, raw: bytes) -> bool:
    try:
        body = decode_body(raw, gzipped=False, max_bytes=1 << 30)
        REFERENCE[kind](body, LIMITS)
        if kind != "samples" and "job" in body:
            v.job_name(body)
        v.batch_id(body)
    except IngestError:
        return False
    return True


def _fast(raw: bytes) -> bool:
    try:
        fast.samples_json(raw, LIMITS)
    except IngestError:
        return False
    return True


def _answers(kind: str, raw: bytes) -> dict[str, bool]:
    got = {"pydantic": _pydantic(kind, raw), "reference": _reference(kind, raw)}
    if kind == "samples":
        got["fast"] = _fast(raw)
    return got


@pytest.mark.parametrize(("kind", "where", "inside", "outside"), CASES,
                         ids=[f"{k}-{w}-{i}" for i, (k, w, _, _) in enumerate(CASES)])
def test_every_validator_takes_the_inside_and_refuses_the_outside(kind: str, where: str, inside: Any,
                                                                   outside: Any) -> None:
    accepted = _answers(kind, _body(kind, where, inside))
    refused = _answers(kind, _body(kind, where, outside))
    assert accepted == dict.fromkeys(accepted, True)
    assert refused == dict.fromkeys(refused, False)


def test_fast_path_takes_inside_bodies_itself() -> None:
    """Meta on the msgspec shape must not push good bodies to the slower reference path."""
    for kind, where, inside, _ in CASES:
        if kind == "samples":
            fast._fast(_body(kind, where, inside), LIMITS)  # raises when it declines


@pytest.mark.parametrize(("inside", "outside"), [(c.MIN_TS, c.MIN_TS - 0.001)])
def test_time_range_agrees_on_both_server_paths(inside: float, outside: float) -> None:
    """The time range is a server setting (default from the contract); pydantic cannot know it."""
    assert (Settings().min_ts, Settings().max_future_s) == (c.MIN_TS, c.MAX_FUTURE_S)
    for kind in REFERENCE:
        start = "ts" if kind == "samples" else "start"
        ok = _body(kind, f"row.{start}", inside).replace(b'"end":1700000001.0', f'"end":{inside + 1}'.encode())
        bad = _body(kind, f"row.{start}", outside).replace(b'"end":1700000001.0', f'"end":{outside + 1}'.encode())
        assert _reference(kind, ok) and not _reference(kind, bad), kind
        if kind == "samples":
            assert _fast(ok) and not _fast(bad)


def test_end_times_are_range_checked_like_starts() -> None:
    """An end after now + max_future_s (events end=1e12, steps end=4e9) is refused like a start."""
    for kind in ("steps", "collectives", "events"):
        assert _reference(kind, _body(kind, "row.end", T + 1)), kind
        assert not _reference(kind, _body(kind, "row.end", LIMITS.max_ts + 1)), kind
    body = decode_body(_body("events", "row.end", 1e12), gzipped=False, max_bytes=1 << 20)
    with pytest.raises(IngestError) as exc:
        v.events(body, LIMITS)
    assert exc.value.detail()[0]["loc"] == ["body", "events", 0, "end"]
