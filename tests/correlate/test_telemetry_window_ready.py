"""A step is judged once its telemetry window is in (pending.process_pending): the newest NIC sample
past the step's end plus the window's pad (EngineConfig.window_pad: half the step, 1-5 s), the
samples its answer reads; not sooner, and not a fixed margin later."""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.constants import DEFAULT_CONFIG

ENGINE = AttributionEngine()


def _stage(api: httpx.Client, job: str, *, step_s: float, sample_after_end_s: float) -> int:
    """One rank on host `<job>-h` with NIC `mlx5_0`, 6 steps of `step_s` that ended 30 s ago, and
    the NIC's counter sampled up to `sample_after_end_s` past the last step's end. Returns the last
    step."""
    host = f"{job}-h"
    api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": 0, "host": host, "gpu": "gpu0", "nic": "mlx5_0"}]}
            ).raise_for_status()
    t0 = time.time() - 30.0 - 6 * step_s
    steps = [{"rank": 0, "step": s, "start": t0 + s * step_s, "end": t0 + (s + 1) * step_s} for s in range(6)]
    api.post("/v1/ingest/steps", json={"job": job, "steps": steps}).raise_for_status()
    end = steps[-1]["end"]
    samples = [{"ts": t, "source": f"{host}:mlx5_0", "metric": "rx_bytes_total", "value": 1e6 * k}
               for k, t in enumerate([t0, end - 1.0, end + sample_after_end_s])]
    api.post("/v1/ingest/samples", json={"samples": samples}).raise_for_status()
    return 5


def _judged(conn: psycopg.Connection, job: str) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT step FROM attributions WHERE job = %s", (job,))}


@pytest.mark.parametrize(("step_s", "after_s", "ready"), [
    (1.0, 1.2, True),    # pad 1 s (the floor): a sample 1.2 s past the end holds the window
    (1.0, 0.8, False),   # ...0.8 s past it does not
    (6.0, 2.5, False),   # a 6-s step's pad is 3 s: 2.5 s past its end is inside its window
    (6.0, 3.2, True),
])
def test_a_step_is_judged_once_a_nic_sample_is_past_its_window(
        api: httpx.Client, db_conn: psycopg.Connection, step_s: float, after_s: float, ready: bool) -> None:
    assert DEFAULT_CONFIG.window_pad(step_s) == max(1.0, step_s / 2)
    job = f"ready-{int(step_s)}-{int(after_s * 10)}"
    last = _stage(api, job, step_s=step_s, sample_after_end_s=after_s)
    ENGINE.clear_caches()
    ENGINE.process_pending(db_conn, job=job)
    assert (last in _judged(db_conn, job)) is ready
    # the earlier steps' windows end before the last sample: every one of them is judged
    assert set(range(last)) <= _judged(db_conn, job)
