"""Issue #18, input limits: what the database cannot hold, or the JSON encoders cannot serve back,
is refused at validation with a 4xx naming the item and field, never a 503 (senders retry those
forever) and never a 500. Against a real service process and a real PostgreSQL."""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from fabricscope.service import contract as c
from tests.support import TestDatabase, own_service

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def own(test_database: TestDatabase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A service and database of this module (on the session's server): it replaces the topology
    and adds an index, which other suites must not see."""
    with own_service(test_database, tmp_path_factory.mktemp("limits")) as (svc, url):
        yield svc.url, url


@pytest.fixture
def api(own: tuple[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=own[0], timeout=30) as client:
        yield client


def _noise(n: int, lo: int = 0x4E00, hi: int = 0x9FFF) -> str:
    """Characters that do not compress: PostgreSQL cannot squeeze them under an index's limit."""
    rng = random.Random(n)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def _sample(i: int, **kw: Any) -> dict[str, Any]:
    return {"ts": time.time() - 60 + i, "source": "lim1:Ethernet1", "metric": "rx_bytes_total", "value": float(i),
            **kw}


def _nested(depth: int, leaf: str = "{}") -> str:
    return '{"a":' * (depth - 1) + leaf + "}" * (depth - 1)


def _refused(r: httpx.Response, loc: list[Any], status: int = 422) -> str:
    assert r.status_code == status, r.text
    assert "Retry-After" not in r.headers
    detail = r.json()["detail"]
    assert detail[0]["loc"] == loc, detail
    return str(detail[0]["msg"])


def test_a_label_the_index_cannot_hold_is_a_422_naming_the_item_not_a_503(api: httpx.Client) -> None:
    """Item 1: a 3,000-character label value was refused by PostgreSQL (index row size) and answered
    503 + Retry-After, so the collector retried it forever and spooled everything behind it."""
    r = api.post("/v1/ingest/samples", json={"samples": [_sample(0), _sample(1, labels={"k": _noise(3000)})]})
    assert "at most 256 characters" in _refused(r, ["body", "samples", 1, "labels", "k"])
    too_many = {f"l{i}": "1" for i in range(c.MAX_LABELS + 1)}
    _refused(api.post("/v1/ingest/samples", json={"samples": [_sample(0, labels=too_many)]}),
             ["body", "samples", 0, "labels"])
    _refused(api.post("/v1/ingest/samples", json={"samples": [_sample(0, source="lim1\x00:x")]}),
             ["body", "samples", 0, "source"])
    # The largest label set the contract allows, in characters that do not compress, is stored.
    biggest = {f"k{i}": _noise(62 - i // 7, 0x10000, 0x1FFFF) for i in range(8)}  # 4-byte characters
    biggest["k7"] += "abc"
    assert len(json.dumps(biggest, ensure_ascii=False, separators=(",", ":")).encode()) == c.LABELS_MAX_BYTES
    r = api.post("/v1/ingest/samples", json={"samples": [_sample(0, labels=biggest)]})
    assert r.status_code == 200 and r.json() == {"accepted": 1}, r.text


def test_what_the_database_refuses_past_validation_is_a_422_not_a_503(api: httpx.Client, own: tuple[str, str]) -> None:
    """Item 1, the mapping itself: a ProgramLimitExceeded (an OperationalError to psycopg) is the
    client's data, not an outage. An extra index on interface attributes (this module's database
    only) makes one that validation lets through."""
    with psycopg.connect(own[1], autocommit=True) as conn:
        conn.execute("CREATE INDEX IF NOT EXISTS limits_blob ON interfaces ((attrs->>'blob'))")
    body = {"devices": [{"name": "lim1", "kind": "switch", "interfaces": [{"name": "e1", "blob": _noise(3000)}]}]}
    msg = _refused(api.put("/v1/topology", json=body), ["body"])
    assert "index row" in msg
    assert api.get("/readyz").status_code == 200  # the database was never down
    links = {"links": [{"a": _noise(500), "b": _noise(501)}]}  # the links' own index: named by validation
    assert "bytes together" in _refused(api.put("/v1/topology", json=links), ["body", "links", 0])


def test_deep_nesting_is_refused_and_reads_keep_working(api: httpx.Client) -> None:
    """Item 2: labels nested 300 deep were stored, then every GET /v1/jobs was a 500; the same
    through device attributes and events.attrs (1,000 deep)."""
    r = api.put("/v1/jobs/deep", content=f'{{"labels":{_nested(300)}}}', headers=JSON)
    assert "nested deeper than 32 levels" in _refused(r, ["body", "labels"])
    r = api.put("/v1/jobs/deep", content=f'{{"ranks":[{{"rank":0,"host":"h","x":{_nested(300)}}}]}}', headers=JSON)
    _refused(r, ["body", "ranks", 0, "x"])
    r = api.put("/v1/topology", content=f'{{"devices":[{{"name":"d","kind":"host","x":{_nested(300)}}}]}}',
                headers=JSON)
    _refused(r, ["body", "devices", 0, "x"])
    r = api.put("/v1/topology", headers=JSON, content='{"devices":[{"name":"d","kind":"host","interfaces":'
                f'[{{"name":"e","x":{_nested(300)}}}]}}]}}')
    _refused(r, ["body", "devices", 0, "interfaces", 0, "x"])
    r = api.post("/v1/ingest/events", headers=JSON, content='{"events":[{"kind":"k","source":"d","start":'
                 f'{time.time()},"attrs":{_nested(1000)}}}]}}')
    _refused(r, ["body", "events", 0, "attrs"])
    r = api.put("/v1/jobs/deep", json={"labels": {"s": "x" * (c.MAX_OBJECT_BYTES + 1)}})
    assert "over the limit of 65536" in _refused(r, ["body", "labels"])
    # At the limit: stored, and read back whole by every reader.
    r = api.put("/v1/jobs/deep", content=f'{{"labels":{_nested(c.MAX_DEPTH)}}}', headers=JSON)
    assert r.status_code == 200, r.text
    listed = api.get("/v1/jobs")
    assert listed.status_code == 200 and any(j["job"] == "deep" for j in listed.json())
    assert api.get("/v1/jobs/deep").json()["labels"] == r.json()["labels"]
    assert api.get("/v1/topology").status_code == 200


def test_end_times_are_range_checked(api: httpx.Client) -> None:
    now = time.time()
    r = api.post("/v1/ingest/events", json={"events": [{"kind": "k", "source": "d", "start": now, "end": 1e12}]})
    _refused(r, ["body", "events", 0, "end"])
    r = api.post("/v1/ingest/steps", json={"job": "ends", "steps": [{"rank": 0, "step": 1, "start": now, "end": 4e9}]})
    _refused(r, ["body", "steps", 0, "end"])
    r = api.post("/v1/ingest/collectives", json={"job": "ends", "collectives": [
        {"rank": 0, "op": "all_reduce", "start": now, "end": 4e9}]})
    _refused(r, ["body", "collectives", 0, "end"])


def test_speed_must_be_a_finite_number(api: httpx.Client) -> None:
    """1e309 parses as infinity: it was stored and read back as null."""
    r = api.put("/v1/topology", headers=JSON, content='{"devices":[{"name":"sp","kind":"switch",'
                '"interfaces":[{"name":"e1","speed_bps":1e309}]}]}')
    _refused(r, ["body", "devices", 0, "interfaces", 0, "speed_bps"])
    r = api.put("/v1/topology", headers=JSON, content='{"links":[{"a":"sp:e1","b":"sp2:e1","speed_bps":1e309}]}')
    _refused(r, ["body", "links", 0, "speed_bps"])


def test_a_rank_beyond_the_column_is_a_422_naming_the_rank(api: httpx.Client) -> None:
    """rank is a PostgreSQL int: 2**62 was a 422 that named only ``body`` (the database's refusal)."""
    now = time.time()
    r = api.post("/v1/ingest/steps", json={"job": "ranks", "steps": [{"rank": 2**62, "step": 1, "start": now,
                                                                       "end": now + 1}]})
    _refused(r, ["body", "steps", 0, "rank"])
    _refused(api.put("/v1/jobs/ranks", json={"ranks": [{"rank": 2**62, "host": "h"}]}), ["body", "ranks", 0, "rank"])
    r = api.post("/v1/ingest/collectives", json={"job": "ranks", "collectives": [
        {"rank": 0, "op": "all_reduce", "start": now, "end": now + 1, "group_size": 2**40}]})
    _refused(r, ["body", "collectives", 0, "group_size"])
    r = api.post("/v1/ingest/steps", json={"job": "ranks", "steps": [{"rank": c.MAX_INT32, "step": 1, "start": now,
                                                                       "end": now + 1}]})
    assert r.status_code == 200, r.text


def test_a_report_window_that_ends_before_it_starts_is_a_422(api: httpx.Client) -> None:
    now = time.time()
    assert api.post("/v1/ingest/steps", json={"job": "window", "steps": [
        {"rank": 0, "step": 1, "start": now, "end": now + 1}]}).status_code == 200
    window = {"from": "2024-01-02T00:00:00Z", "to": "2024-01-01T00:00:00Z"}
    for path in ("/v1/jobs/window/report", "/v1/jobs/window/steps"):
        _refused(api.get(path, params=window), ["query", "to"])
        assert api.get(path, params={"from": window["to"], "to": window["from"]}).status_code == 200


def test_a_job_name_is_one_a_job_url_can_reach(api: httpx.Client) -> None:
    """team/a was accepted at ingest, but no /v1/jobs/{job} URL could reach it."""
    now = time.time()
    step = {"rank": 0, "step": 1, "start": now, "end": now + 1}
    _refused(api.post("/v1/ingest/steps", json={"job": "team/a", "steps": [step]}), ["body", "job"])
    _refused(api.post("/v1/ingest/steps", json={"job": "..", "steps": [step]}), ["body", "job"])
    r = api.post("/v1/ingest/events", json={"events": [{"kind": "k", "source": "d", "start": now, "job": "team/a"}]})
    _refused(r, ["body", "events", 0, "job"])
    _refused(api.put("/v1/jobs/%2E%2E", json={}), ["path", "job"])
    odd = "team a%?#é.v2"  # every other character is fine: percent-encoded, it reaches the job
    assert api.post("/v1/ingest/steps", json={"job": odd, "steps": [step]}).status_code == 200
    r = api.get(f"/v1/jobs/{urllib.parse.quote(odd, safe='')}")
    assert r.status_code == 200 and r.json()["job"] == odd
    assert api.get(f"/v1/jobs/{urllib.parse.quote(odd, safe='')}/steps").status_code == 200



def test_a_lookup_the_database_would_refuse_names_the_path_field(api: httpx.Client) -> None:
    """A NUL in a source looked up was refused by psycopg and answered as a 422 naming ``body``."""
    _refused(api.get("/v1/sources/lim1%00x/metrics/rx_bytes_total"), ["path", "source"])
    _refused(api.get("/v1/sources", params={"device": "lim1\x00"}), ["query", "device"])


def test_labels_merged_over_registrations_stay_bounded(api: httpx.Client) -> None:
    """Each PUT is bounded, and labels merge across PUTs: the merged set is bounded too, and a PUT
    that would overflow it changes nothing."""
    half = "x" * (c.MAX_OBJECT_BYTES // 2)
    assert api.put("/v1/jobs/merged", json={"labels": {"a": half}}).status_code == 200
    r = api.put("/v1/jobs/merged", json={"labels": {"b": half}})
    assert "merged with those already stored" in _refused(r, ["body", "labels"])
    assert api.get("/v1/jobs/merged").json()["labels"] == {"a": half}
    assert api.put("/v1/jobs/merged", json={"labels": {"a": "small", "b": "small"}}).status_code == 200
