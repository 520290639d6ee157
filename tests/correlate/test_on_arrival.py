"""Steps are judged as they arrive (#44 item 7): a real `serve` whose interval job is 60 s away
attributes a step posted through the ingest API within seconds; the post never waits for that;
a burst of posts makes a bounded number of passes."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fabricscope.service.arrival import MAX_WAITING_ENDS, Arrivals
from tests.support import TestDatabase, own_service

# The interval job would first run a minute after start: any attribution sooner came from a wake.
SLOW_INTERVAL = {"FABRICSCOPE_CORRELATE_INTERVAL_S": "60"}


def _steps(job: str, step: int, ranks: range, t: float, dur: float = 0.5) -> dict[str, Any]:
    return {"job": job, "steps": [{"rank": r, "step": step, "start": t, "end": t + dur,
                                   "phases": {"forward_backward": dur * 0.9}} for r in ranks]}


def _attributed(dsn: str, job: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {int(r[0]) for r in conn.execute("SELECT step FROM attributions WHERE job = %s", (job,))}


def _wait_attributed(dsn: str, job: str, step: int, timeout_s: float) -> float | None:
    """Seconds until `step` of `job` has a stored attribution; None if not within timeout_s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if step in _attributed(dsn, job):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def _passes(api: httpx.Client, trigger: str) -> float:
    m = re.search(rf'^fabricscope_attribution_passes_total\{{trigger="{trigger}"\}} (\S+)$',
                  api.get("/metrics").text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def on_arrival(test_database: TestDatabase, tmp_path: Path) -> Iterator[tuple[httpx.Client, str]]:
    with own_service(test_database, tmp_path, env=SLOW_INTERVAL) as (svc, dsn), \
            httpx.Client(base_url=svc.url, timeout=30) as api:
        yield api, dsn


def test_a_posted_step_is_attributed_long_before_the_interval(on_arrival: tuple[httpx.Client, str]) -> None:
    api, dsn = on_arrival
    t = time.time() - 30
    for step in range(6):
        api.post("/v1/ingest/steps", json=_steps("arr-a", step, range(4), t + step)).raise_for_status()
    took = _wait_attributed(dsn, "arr-a", 5, 10)
    assert took is not None and took < 5, f"step 5 not attributed within 10 s of its post ({took})"
    assert _attributed(dsn, "arr-a") == set(range(6))  # one wake judges everything pending
    assert _passes(api, "interval") == 0 and _passes(api, "arrival") >= 1


def test_off_waits_for_the_interval(test_database: TestDatabase, tmp_path: Path) -> None:
    """The setting's other side, and what the test above would see without the wake."""
    env = {**SLOW_INTERVAL, "FABRICSCOPE_CORRELATE_ON_ARRIVAL": "false"}
    with own_service(test_database, tmp_path, env=env) as (svc, dsn), httpx.Client(base_url=svc.url) as api:
        api.post("/v1/ingest/steps", json=_steps("arr-off", 0, range(4), time.time() - 5)).raise_for_status()
        assert _wait_attributed(dsn, "arr-off", 0, 3) is None
        assert _passes(api, "arrival") == 0


def test_the_post_does_not_wait_for_attribution(on_arrival: tuple[httpx.Client, str]) -> None:
    """The engine is held up (its job_ranks read waits on a table lock); the post still answers at
    once, and the step is attributed as soon as the engine can go on."""
    api, dsn = on_arrival
    with psycopg.connect(dsn) as holder:
        holder.execute("LOCK TABLE job_ranks IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        api.post("/v1/ingest/steps", json=_steps("arr-b", 0, range(4), time.time() - 5)).raise_for_status()
        answered = time.monotonic() - t0
        time.sleep(1.0)  # the wake's pass has begun and waits on the lock
        assert _attributed(dsn, "arr-b") == set()
        waiting = holder.execute("SELECT count(*) FROM pg_locks WHERE relation = 'job_ranks'::regclass "
                                 "AND NOT granted").fetchone()
        assert waiting is not None and waiting[0] >= 1, "the pass never started"
    assert answered < 1.0, f"the post took {answered:.2f} s"
    took = _wait_attributed(dsn, "arr-b", 0, 10)
    assert took is not None and took < 5


def test_a_burst_of_posts_makes_few_passes(on_arrival: tuple[httpx.Client, str]) -> None:
    """64 ranks post one step each, 8 at a time: passes are bounded by the debounce (0.2 s), not
    by the number of posts."""
    api, dsn = on_arrival
    t = time.time() - 5
    before = _passes(api, "arrival")

    def post(ranks: range) -> None:
        with httpx.Client(base_url=str(api.base_url), timeout=30) as c:
            for r in ranks:
                c.post("/v1/ingest/steps", json=_steps("arr-c", 0, range(r, r + 1), t)).raise_for_status()

    t0 = time.monotonic()
    threads = [threading.Thread(target=post, args=(range(i, 64, 8),)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    burst = time.monotonic() - t0
    assert _wait_attributed(dsn, "arr-c", 0, 10) is not None
    time.sleep(0.5)  # the last wake's pass is counted
    passes = _passes(api, "arrival") - before
    # one pass per debounce window at most (a pass's own time only lowers that), plus the last one
    assert 1 <= passes <= burst / 0.2 + 2, f"{passes} passes for 64 posts in {burst:.2f} s"
    assert passes < 16


def test_telemetry_wakes_a_job_once_it_passes_a_step_end_plus_the_margin() -> None:
    """A long step's telemetry comes after the step itself: the samples that bring the horizon
    past its end + margin wake the job again, earlier samples do not, and only while a worker runs."""
    a = Arrivals(margin_s=2.0)
    a.steps("j", 100.0)
    assert not a.wait(0) and a.take() == set()  # no worker: ingest notes nothing
    a.active = True
    a.steps("j", 100.0)
    a.steps("k", 200.0)
    assert a.wait(0) and a.take() == {"j", "k"} and not a.wait(0)
    a.telemetry(101.9)
    assert not a.wait(0)
    a.telemetry(102.0)
    assert a.take() == {"j"}
    a.telemetry(150.0)  # j's step is judged (or left to the interval): not woken twice
    assert a.take() == set()
    for end in range(1000):
        a.steps("k", 1000.0 + end)
    assert a.take() == {"k"}
    oldest_kept = 1000.0 + 1000 - MAX_WAITING_ENDS  # a job without telemetry keeps a bounded list
    a.telemetry(oldest_kept + 2.0 - 0.1)
    assert a.take() == set()
    a.telemetry(oldest_kept + 2.0)
    assert a.take() == {"k"}


def test_a_stop_cancels_an_arrival_pass_that_waits(test_database: TestDatabase, tmp_path: Path) -> None:
    """#46 item 9 for the new worker: its pass is one of the background jobs a stop cancels."""
    with own_service(test_database, tmp_path, env=SLOW_INTERVAL) as (svc, dsn), \
            psycopg.connect(dsn) as holder, httpx.Client(base_url=svc.url, timeout=30) as api:
        holder.execute("LOCK TABLE job_ranks IN ACCESS EXCLUSIVE MODE")
        api.post("/v1/ingest/steps", json=_steps("arr-d", 0, range(4), time.time() - 5)).raise_for_status()
        deadline = time.monotonic() + 10
        while not holder.execute("SELECT 1 FROM pg_locks WHERE relation = 'job_ranks'::regclass "
                                 "AND NOT granted").fetchone():
            assert time.monotonic() < deadline, "the pass never started"
            time.sleep(0.1)
        t0 = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        status = svc.proc.wait(30)  # 8 s for requests + 2 s grace + the cancel, with room to spare
        assert status == 0 and time.monotonic() - t0 < 20, svc.tail()
        log = svc.log.read_text()
        assert "cancelling background jobs still running" in log and "attribution on arrival" in log, svc.tail()
