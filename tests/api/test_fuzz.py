"""API fuzz: schemathesis generates requests (valid and invalid) from /openapi.json against the
running service; no response may be a 5xx, also with values nested deeply or huge strings in them."""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tests.support import TestDatabase, start_service

# /readyz answers 503 by design when the database is down; it is exercised in test_auth_outage.
_SKIP = {"GET /readyz"}


@pytest.fixture
def fuzz_service_url(fresh_database: TestDatabase, tmp_path: Path) -> Iterator[str]:
    """A service of its own: the fuzzer replaces topologies and would disturb other tests' data."""
    svc = start_service(fresh_database.url, tmp_path)
    yield svc.url
    svc.stop()


def test_no_server_errors(fuzz_service_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_service_url}/openapi.json")
    checked = []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.label in _SKIP:
            continue

        @given(case=op.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE)
               | op.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE))
        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case: schemathesis.Case) -> None:
            response = case.call(timeout=30)
            case.validate_response(response, checks=[not_a_server_error])

        fuzz()
        checked.append(op.label)
    assert "POST /v1/ingest/samples" in checked and "PUT /v1/topology" in checked
    assert len(checked) >= 11, checked


# --- deep nesting and huge strings (#18) ---------------------------------------------------------
# For every route with a JSON body, a base body (the one schemathesis generates, or a valid one that
# gets past the other checks to the database) gets one nasty value: in place of any value, or as a
# new key of any object (extra attributes), half of the time at a place meant to hold free-form data.
# Deep values are spliced in as raw JSON text: a Python encoder would hit its recursion limit first.

NOW = time.time()
VALID: dict[str, tuple[Any, list[tuple[Any, ...]]]] = {  # (body, its places for free-form data)
    "POST /v1/ingest/samples": ({"samples": [{"ts": NOW, "source": "fz1:e1", "metric": "rx_bytes_total",
                                              "value": 1.0, "labels": {"q": "3"}}]},
                                [("samples", 0, "labels", "q"), ("samples", 0, "labels"), ("samples", 0, "source")]),
    "POST /v1/ingest/steps": ({"job": "fz", "steps": [{"rank": 0, "step": 1, "start": NOW, "end": NOW + 1,
                                                      "phases": {"fwd": 0.5}}]},
                              [("steps", 0, "phases"), ("steps", 0, "rank"), ("steps", 0, "end"), ("job",)]),
    "POST /v1/ingest/collectives": ({"job": "fz", "collectives": [{"rank": 0, "op": "all_reduce", "start": NOW,
                                                                  "end": NOW + 1, "group_size": 2}]},
                                    [("collectives", 0, "group_size"), ("collectives", 0, "op"), ("job",)]),
    "POST /v1/ingest/events": ({"events": [{"kind": "pfc_storm", "source": "fz1", "start": NOW, "end": NOW + 1,
                                            "attrs": {"k": "v"}}]},
                               [("events", 0, "attrs"), ("events", 0, "attrs", "k"), ("events", 0, "end")]),
    "PUT /v1/topology": ({"devices": [{"name": "fz1", "kind": "switch", "vendor": "x",
                                       "interfaces": [{"name": "e1", "speed_bps": 1e9, "lane": "1"}]}],
                          "links": [{"a": "fz1:e1", "b": "fz2:e1", "speed_bps": 1e9}]},
                         [("devices", 0, "vendor"), ("devices", 0, "interfaces", 0, "lane"),
                          ("devices", 0, "interfaces", 0, "speed_bps"), ("links", 0, "a"), ("links", 0, "speed_bps")]),
    "POST /v1/topology/links": ({"links": [{"a": "fz1:e1", "b": "fz2:e1"}]}, [("links", 0, "a"), ("links", 0, "b")]),
    "PUT /v1/jobs/{job}": ({"ranks": [{"rank": 0, "host": "h", "gpu": "g", "slot": "1"}], "labels": {"team": "a"}},
                           [("labels", "team"), ("labels",), ("ranks", 0, "slot"), ("ranks", 0, "rank"),
                            ("ranks", 0, "gpu")]),
}


def _deep(depth: int, bracket: str) -> str:
    return '{"a":' * depth + "{}" + "}" * depth if bracket == "{" else "[" * depth + "]" * depth


def _noise(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n))


# Sizes from a list, not a range: hypothesis favours the small end of a range, which is harmless.
NASTY = st.one_of(
    st.builds(_deep, st.sampled_from([33, 300, 1000, 5000]), st.sampled_from("{[")),
    st.builds(lambda n, seed: json.dumps(_noise(n, seed)), st.sampled_from([600, 3000, 70_000]), st.integers(0, 9)),
    st.sampled_from(["1e309", "-1e309", "NaN", "18446744073709551616", str(2**62), str(2**31), '"\\u0000"',
                     '"a\\u0000b"', '"\\ud800"', '"team/a"', '".."', '""']),
)


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path in a JSON value but the root."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for k, v in items:
        yield (*path, k)
        yield from _places(v, (*path, k))


def _splice(body: Any, path: tuple[Any, ...], new_key: str | None, raw: str) -> str:
    """``body`` as JSON with ``raw`` (JSON text) at ``path``, or under ``new_key`` of the object there."""
    token = "@@nasty@@"
    doc = copy.deepcopy(body)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if new_key is not None and isinstance(parent[path[-1]], dict):
        parent[path[-1]][new_key] = token
    else:
        parent[path[-1]] = token
    return json.dumps(doc).replace(json.dumps(token), raw)


def _one(client: httpx.Client, label: str, case: schemathesis.Case, data: st.DataObject) -> None:
    valid, hot = VALID.get(label, (None, []))
    body = valid if valid is not None and data.draw(st.booleans()) else case.body
    places = list(_places(body))
    if not places:
        return
    at_hot = body is valid and data.draw(st.booleans())
    path = data.draw(st.sampled_from(hot if at_hot else places))
    new_key = data.draw(st.sampled_from([None, "x", "blob"]))
    raw = _splice(body, path, new_key, data.draw(NASTY))
    r = client.request(case.method, case.formatted_path, params=case.query, content=raw,
                       headers={"Content-Type": "application/json"})
    assert r.status_code < 500, (case.method, case.formatted_path, path, new_key, raw[:300], r.text)


def _fuzzer(client: httpx.Client, op: Any) -> Any:
    @given(case=op.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE), data=st.data())
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def fuzz(case: schemathesis.Case, data: st.DataObject) -> None:
        _one(client, op.label, case, data)

    return fuzz


def test_no_server_errors_on_deep_and_huge_values(fuzz_service_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_service_url}/openapi.json")
    checked = []
    with httpx.Client(base_url=fuzz_service_url, timeout=30) as client:
        for result in schema.get_all_operations():
            op = result.ok()
            if op.method.upper() in ("POST", "PUT") and op.label not in _SKIP:
                _fuzzer(client, op)()
                checked.append(op.label)
    assert set(VALID) <= set(checked), checked
