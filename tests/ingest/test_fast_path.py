"""The msgspec fast path of sample ingest must accept exactly what the reference validator accepts,
produce the same columns, and answer bad input with the same error (the field named the same way)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricscope.service.ingest import fast
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.body import decode_body
from fabricscope.service.ingest.errors import IngestError

LIMITS = v.Limits(max_batch=50, min_ts=946_684_800.0, max_ts=time.time() + 3600)
T = 1.7e9


def _reference(raw: bytes) -> tuple[Any, ...]:
    """What the API did before the fast path: decode_body (empty, invalid JSON) + validate.samples."""
    try:
        body = decode_body(raw, gzipped=False, max_bytes=1 << 30)
        cols = v.samples(body, LIMITS)
        return ("ok", _cols(cols), v.batch_id(body))
    except IngestError as exc:
        return ("error", type(exc).__name__, exc.detail())


def _via_fast(raw: bytes) -> tuple[Any, ...]:
    try:
        cols, bid = fast.samples_json(raw, LIMITS)
        return ("ok", _cols(cols), bid)
    except IngestError as exc:
        return ("error", type(exc).__name__, exc.detail())


def _cols(c: v.SampleColumns) -> tuple[Any, ...]:
    d = None if c.discontinuity is None else c.discontinuity.tolist()
    return c.ts.tolist(), c.source, c.metric, c.value.tolist(), c.label_keys, d


def _sample(**kw: Any) -> dict[str, Any]:
    return {"ts": T, "source": "leaf1:Ethernet1", "metric": "rx_bytes_total", "value": 1.0, **kw}


def test_a_typical_body_takes_the_fast_path() -> None:
    body = {"batch_id": "b1", "samples": [_sample(), _sample(labels={"priority": 3}, value=2),
                                          _sample(ts="2023-11-14T22:13:20Z", discontinuity=True)]}
    cols, bid = fast._fast(orjson.dumps(body), LIMITS)  # no fallback: it answered itself
    assert bid == "b1"
    assert cols.label_keys == ["", '{"priority":"3"}', ""]
    assert cols.ts.tolist() == [T, T, 1_700_000_000.0]
    assert cols.discontinuity is not None and cols.discontinuity.tolist() == [False, False, True]
    assert _via_fast(orjson.dumps(body)) == _reference(orjson.dumps(body))


BAD = [
    b"", b"[]", b"{", b'{"samples": 3}', b'{"samples": [3]}',
    orjson.dumps({"samples": [_sample(ts=True)]}),
    orjson.dumps({"samples": [_sample(ts="yesterday")]}),
    orjson.dumps({"samples": [_sample(ts="2023-11-14T22:13:20")]}),
    orjson.dumps({"samples": [_sample(ts=1.0)]}),  # before 2000
    orjson.dumps({"samples": [_sample(source="")]}),
    orjson.dumps({"samples": [_sample(source="x" * 513)]}),
    orjson.dumps({"samples": [_sample(metric="RxBytes")]}),
    orjson.dumps({"samples": [_sample(metric="rx_bytes_total\n")]}),  # "$" in a pattern would take this
    orjson.dumps({"samples": [_sample(labels={"priority\n": "3"})]}),
    orjson.dumps({"samples": [_sample(value="1")]}),
    orjson.dumps({"samples": [_sample(value=None)]}),
    orjson.dumps({"samples": [_sample(labels=[1])]}),
    orjson.dumps({"samples": [_sample(labels={"bad key": "1"})]}),
    orjson.dumps({"samples": [_sample(labels={"k": 1.5})]}),
    orjson.dumps({"samples": [_sample()] * 51}),  # over max_batch: 413
    orjson.dumps({"samples": [_sample()], "batch_id": ""}),
    orjson.dumps({"samples": [_sample()], "batch_id": 7}),
    # two bad rows: the first one (in row order, then field order) is the one named
    orjson.dumps({"samples": [_sample(), _sample(labels={"bad key": "1"}), _sample(ts="nope")]}),
    b'{"samples": [{"ts": 1.7e9, "source": "a", "metric": "m", "value": 1e999}]}',
]


@pytest.mark.parametrize("raw", BAD, ids=range(len(BAD)))
def test_bad_bodies_get_the_reference_answer(raw: bytes) -> None:
    got, want = _via_fast(raw), _reference(raw)
    assert want[0] == "error"
    assert got == want


_text = st.one_of(st.sampled_from(["leaf1:Ethernet1", "h:eth0", "", "x" * 513]), st.text(max_size=8))
_num = st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
                 st.integers(min_value=-(2**53), max_value=2**53), st.just(T), st.booleans(), st.none())
_field = {
    "ts": st.one_of(st.floats(min_value=9.4e8, max_value=1.8e9), st.just(T), st.just("2024-01-01T00:00:00Z"),
                    st.just("2024-01-01"), st.booleans(), st.none()),
    "source": _text,
    "metric": st.one_of(st.sampled_from(["rx_bytes_total", "oper_up", "Bad", "a" * 129]), st.none()),
    "value": _num,
    "labels": st.one_of(st.none(), st.just({}), st.dictionaries(
        st.sampled_from(["priority", "queue", "bad key", "_x"]),
        st.one_of(st.sampled_from(["3", "q1"]), st.integers(0, 7), st.floats(0, 1), st.booleans()), max_size=3),
        st.just([1])),
    "discontinuity": st.one_of(st.none(), st.booleans(), st.just("yes")),
}
_row = st.fixed_dictionaries({k: _field[k] for k in ("ts", "source", "metric", "value")},
                             optional={k: _field[k] for k in ("labels", "discontinuity")})
_good_row = st.fixed_dictionaries({"ts": st.just(T), "source": st.just("h:eth0"), "metric": st.just("oper_up"),
                                   "value": st.floats(-1e6, 1e6)},
                                  optional={"labels": st.just({"priority": 3})})


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.one_of(_good_row, _good_row, _row), max_size=6),
       batch_id=st.one_of(st.none(), st.just("b-1"), st.just(""), st.integers(-(2**63), 2**63 - 1)))
def test_fast_path_agrees_with_the_reference(rows: list[dict[str, Any]], batch_id: Any) -> None:
    body: dict[str, Any] = {"samples": rows}
    if batch_id is not None:
        body["batch_id"] = batch_id
    raw = orjson.dumps(body)
    assert _via_fast(raw) == _reference(raw)


def test_columns_are_arrays_of_the_right_kind() -> None:
    cols, _ = fast.samples_json(orjson.dumps({"samples": [_sample(value=3), _sample()]}), LIMITS)
    assert cols.ts.dtype == np.float64 and cols.value.dtype == np.float64 and cols.value.tolist() == [3.0, 1.0]
