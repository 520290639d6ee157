"""The engine's TypedDicts (records.py) agree with the API's pydantic models (schemas.py): every key
the engine returns is a field of the model with a compatible type, so a response never drops or
rejects what the engine computed."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import httpx
import psycopg
import pytest
from pydantic import BaseModel

from fabricscope.service import schemas
from fabricscope.service.correlate import AttributionEngine, records
from tests.correlate.test_end_to_end import _fault, _send

PAIRS = [(records.Attribution, schemas.Attribution), (records.EvidenceRow, schemas.Evidence),
         (records.Cause, schemas.Cause)]


def _alternatives(tp: Any) -> tuple[Any, ...]:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)


def _accepts(model_tp: Any, engine_tp: Any) -> bool:
    """Whether every value of `engine_tp` validates as `model_tp` without losing anything."""
    return all(any(_accepts_one(m, e) for m in _alternatives(model_tp)) for e in _alternatives(engine_tp))


def _accepts_one(m: Any, e: Any) -> bool:
    if m is e or (m is float and e is int):
        return True
    if is_typeddict(e) and isinstance(m, type) and issubclass(m, BaseModel):
        return not disagreements(e, m)
    if get_origin(m) is not None and get_origin(m) is get_origin(e) and get_origin(m) in (list, dict):
        return all(_accepts(ma, ea) for ma, ea in zip(get_args(m), get_args(e), strict=True))
    return False


def disagreements(td: Any, model: type[BaseModel]) -> list[str]:
    hints = get_type_hints(td)
    out = [f"{td.__name__}.{k} is not a field of {model.__name__}" for k in hints if k not in model.model_fields]
    out += [f"{td.__name__}.{k}: {hints[k]} does not validate as {model.model_fields[k].annotation}"
            for k in hints if k in model.model_fields and not _accepts(model.model_fields[k].annotation, hints[k])]
    out += [f"{model.__name__}.{k} is required but {td.__name__} may leave it out"
            for k, f in model.model_fields.items() if f.is_required() and k not in td.__required_keys__]
    return out


@pytest.mark.parametrize(("td", "model"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_typeddict_keys_are_model_fields_with_compatible_types(td: Any, model: type[BaseModel]) -> None:
    assert disagreements(td, model) == []


def test_the_checker_catches_a_mismatch() -> None:
    class Wrong(typing.TypedDict):
        layer: int  # the model says str
        component: str | None
        extra: str  # not in the model

    assert len(disagreements(Wrong, schemas.Cause)) == 4  # layer, extra, and lost_s/confidence required


def test_an_engine_result_validates_and_the_api_returns_all_of_it(service_url: str, database_url: str,
                                                                  db_conn: psycopg.Connection) -> None:
    net = _fault("fabric_congestion", "spine_pfc", seed=1, sev=0.5)
    gpu = _fault("gpu_straggler", "", seed=2, sev=0.15)
    sc = _send(service_url, [net, gpu], seed=6, name="records")
    a = AttributionEngine().attribute_step(db_conn, job=sc.job, step=21, store=False)
    assert a is not None and a["slow"] and len(a["causes"]) == 2
    kinds = {e.get("kind") for e in a["evidence"]}
    assert kinds == {"timing", None}  # both a rank's timing and telemetry rows are exercised
    parsed = schemas.Attribution.model_validate(a)
    assert parsed.model_dump(exclude_unset=True) == a
    got = httpx.get(f"{service_url}/v1/jobs/{sc.job}/steps/21/attribution", timeout=30).json()
    assert got == a
