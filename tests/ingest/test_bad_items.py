"""A batch with bad items is refused naming each of them (its position and field), the same way by
the fast path and the reference loop; the bus writer's path keeps the good items of such a batch."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from fabricscope.core.transport import named_items
from fabricscope.service import contract as c
from fabricscope.service.ingest import fast
from fabricscope.service.ingest import validate as v
from fabricscope.service.ingest.errors import IngestError, InvalidItems
from fabricscope.service.ingest.partial import without_bad_items

LIMITS = v.Limits(max_batch=1000, min_ts=c.MIN_TS, max_ts=time.time() + c.MAX_FUTURE_S)
T = 1.7e9


def _sample(i: int, **kw: Any) -> dict[str, Any]:
    return {"ts": T + i, "source": "leaf1:Ethernet1", "metric": "rx_bytes_total", "value": float(i), **kw}


def _bad(i: int, how: str) -> dict[str, Any]:
    return {"label": _sample(i, labels={"q": "x" * 3000}), "value": _sample(i, value="1"),
            "ts": _sample(i, ts=1e12), "source": _sample(i, source="a\x00b")}[how]


def _refusal(raw: bytes) -> list[dict[str, Any]]:
    with pytest.raises(IngestError) as exc:
        fast.samples_json(raw, LIMITS)
    with pytest.raises(IngestError) as ref:
        v.samples(orjson.loads(raw), LIMITS)
    assert exc.value.detail() == ref.value.detail()
    return exc.value.detail()


def test_every_bad_item_is_named_in_order_by_both_paths() -> None:
    rows = [_sample(i) for i in range(20)]
    rows[3], rows[7], rows[11], rows[15] = _bad(3, "ts"), _bad(7, "label"), _bad(11, "value"), _bad(15, "source")
    detail = _refusal(orjson.dumps({"samples": rows}))
    assert [d["loc"] for d in detail] == [["body", "samples", 3, "ts"], ["body", "samples", 7, "labels", "q"],
                                          ["body", "samples", 11, "value"], ["body", "samples", 15, "source"]]
    assert "at most 256 characters" in detail[1]["msg"]
    assert named_items(detail, "samples") == (3, 7, 11, 15)
    assert named_items(detail, "events") == ()  # another batch's positions mean nothing here


def test_one_bad_item_keeps_the_old_single_error_shape() -> None:
    detail = _refusal(orjson.dumps({"samples": [_sample(0), _bad(1, "label")]}))
    assert detail == [{"loc": ["body", "samples", 1, "labels", "q"],
                       "msg": "label values are at most 256 characters", "type": "string_too_long"}]


def test_the_list_is_capped() -> None:
    rows = [_bad(i, "value") for i in range(c.MAX_ITEM_ERRORS + 50)]
    detail = _refusal(orjson.dumps({"samples": rows}))
    assert len(detail) == c.MAX_ITEM_ERRORS and detail[-1]["loc"][2] == c.MAX_ITEM_ERRORS - 1


def test_a_batch_level_error_names_no_item() -> None:
    with pytest.raises(IngestError) as exc:
        v.job_name({"job": "team/a"})
    assert exc.value.loc == ["body", "job"] and named_items(exc.value.detail(), "steps") == ()


def test_the_writer_path_keeps_the_good_items_and_reports_the_bad_ones_where_they_were() -> None:
    n_bad = c.MAX_ITEM_ERRORS + 20  # two rounds: positions must still be those of the batch as received
    rows = [_sample(i) for i in range(400)]
    bad_at = list(range(5, 5 + 3 * n_bad, 3))
    for i in bad_at:
        rows[i] = _bad(i, "label")
    body = {"batch_id": "b-1", "samples": rows}
    cols, kept, rejected = without_bad_items(body, "samples", lambda b: v.samples(b, LIMITS))
    assert len(cols) == 400 - n_bad and cols.value.tolist() == [float(i) for i in range(400) if i not in bad_at]
    assert kept["batch_id"] == "b-1" and len(kept["samples"]) == len(cols)
    assert rejected is not None and [d["loc"][2] for d in rejected.detail] == bad_at
    assert rejected.body == {"batch_id": "b-1", "samples": [rows[i] for i in bad_at]}


def test_the_writer_path_refuses_a_batch_with_nothing_good() -> None:
    rows = [_bad(0, "label"), _bad(1, "value")]
    with pytest.raises(InvalidItems):
        without_bad_items({"samples": rows}, "samples", lambda b: v.samples(b, LIMITS))
    with pytest.raises(IngestError) as exc:  # a batch-level error: nothing kept either
        without_bad_items({"samples": "nope"}, "samples", lambda b: v.samples(b, LIMITS))
    assert exc.value.loc == ["body", "samples"]


@pytest.mark.parametrize("where", ["top", "label"])
def test_json_nested_thousands_deep_is_a_422_not_a_recursion_error(where: str) -> None:
    """msgspec raises RecursionError on it: the fast path must hand it to the reference path."""
    deep = "[" * 5000 + "]" * 5000
    raw = (f'{{"x": {deep}, "samples": []}}' if where == "top" else
           f'{{"samples": [{{"ts": {T}, "source": "a", "metric": "m", "value": 1, "labels": {{"q": {deep}}}}}]}}')
    with pytest.raises(IngestError) as exc:
        fast.samples_json(raw.encode(), LIMITS)
    assert exc.value.kind == "json_invalid" and exc.value.status_code == 422
