"""The engine's caches: bounded (least recently used out first), expiring, and safe to share between
threads (the API's request threads and the scheduler use one engine)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine, EngineConfig
from fabricscope.service.correlate.cache import LruCache
from tests.correlate.test_end_to_end import STEPS, _fault, _send


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_inserting_past_max_size_evicts_the_least_recently_used() -> None:
    c: LruCache[str, int] = LruCache(max_size=3)
    for i, k in enumerate("abc"):
        c.put(k, i)
    c.put("d", 3)
    assert len(c) == 3 and "a" not in c and c.get("b") == 1
    c.put("e", 4)  # "b" was just read: "c" is now the oldest
    assert "c" not in c and {k: c.get(k) for k in "bde"} == {"b": 1, "d": 3, "e": 4}
    c.update({"f": 5, "g": 6})
    assert len(c) == 3 and c.get_many(["b", "d", "e", "f", "g"]) == {"e": 4, "f": 5, "g": 6}


def test_entries_expire_after_ttl_and_none_is_a_value() -> None:
    clock = FakeClock()
    c: LruCache[str, int | None] = LruCache(max_size=4, ttl_s=10.0, clock=clock)
    c.put("a", 1)
    c.put("gone", None)  # a cached "no such row"
    clock.now = 9.9
    assert c.get("a") == 1 and c.get_many(["gone", "x"]) == {"gone": None}
    clock.now = 10.0
    assert c.get("a") is None and c.get_many(["gone"]) == {} and len(c) == 0


def test_max_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_size"):
        LruCache(max_size=0)


def test_engine_caches_stay_within_their_bounds(service_url: str, db_conn: psycopg.Connection) -> None:
    sc = _send(service_url, [_fault("nic_degradation", "", seed=61)], seed=62, name="bounded")
    small = AttributionEngine(EngineConfig(summary_cache_size=10, topo_cache_size=1))
    big = AttributionEngine()
    for s in range(STEPS):
        assert small.attribute_step(db_conn, job=sc.job, step=s, store=False) == \
            big.attribute_step(db_conn, job=sc.job, step=s, store=False)
    assert len(small._summaries) == 10 and len(small._topo) == 1
    assert len(big._summaries) >= STEPS - 2  # all but the newest steps are final


def test_concurrent_use_gives_the_serial_answers(service_url: str, database_url: str,
                                                 db_conn: psycopg.Connection) -> None:
    faults = [_fault("fabric_congestion", "leaf_down_ecn", seed=71, start=12),
              _fault("gpu_straggler", "", seed=72, start=22)]
    jobs = [_send(service_url, faults, seed=73 + i, name=f"threads{i}").job for i in range(2)]
    serial = {(j, s): AttributionEngine().attribute_step(db_conn, job=j, step=s, store=False)
              for j in jobs for s in range(STEPS)}
    assert sum(1 for a in serial.values() if a and a["slow"]) >= 4
    shared = AttributionEngine(EngineConfig(summary_cache_size=40))  # small: threads also evict each other's

    def work(seed: int) -> dict[tuple[str, int], object]:
        order = list(serial)
        random.Random(seed).shuffle(order)
        with psycopg.connect(database_url, autocommit=True) as conn:
            return {(j, s): shared.attribute_step(conn, job=j, step=s, store=False) for j, s in order}

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    for got in results:
        assert got == serial
