"""End to end with a real multi-process gloo job through the hook: its all-reduce busbw becomes the
fabric's acceptance baseline, an identical run achieves about that, and a throttled run (a sleep
inside rank 0's all-reduce from a given step on, tests/training/train_job.py --throttle-from) falls
far below it and fires busbw_below_acceptance exactly once, through the service's alert job, to a
real webhook receiver.

On this 2-core shared machine a step's fraction (median over its 8-10 all-reduce records of
achieved/baseline) of an unthrottled run scatters between ~0.15 and ~2.5, with runs of at most ~5
consecutive steps below 0.8 in the runs measured; the throttled steps sit at 0.02-0.08. N=10
consecutive steps separates the two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import torch  # noqa: F401 - required (CPU wheel): fail loudly if it is missing

from tests.acceptance.conftest import ADMIN, alerts, client, post_run, run_body, unique, wait_for
from tests.alerts.receiver import Receiver, free_port
from tests.support import ServiceProcess
from tests.training.launch import run_job

pytestmark = pytest.mark.slow

WORLD, STEPS, THROTTLE_FROM, THROTTLE_S, N = 2, 40, 20, 0.02, 10


def _run(svc: ServiceProcess, workdir: Path, job: str, *extra: str) -> None:
    workdir.mkdir()
    outs = run_job(WORLD, workdir, ["--steps", str(STEPS), "--mode", "explicit", *extra],
                   {"FABRICSCOPE_URL": svc.url, "FABRICSCOPE_JOB": job, "FABRICSCOPE_SPOOL": str(workdir / "spool"),
                    "FABRICSCOPE_TOKEN": ADMIN}, timeout=120)
    for o in outs:
        assert o["stats"]["dropped"] == 0 and o["stats"]["errors"] == 0, o["stats"]


def _all_reduce(api: httpx.Client, job: str, **params: str) -> dict[int, dict[str, Any]]:
    r = api.get(f"/v1/jobs/{job}/efficiency", params=params)
    assert r.status_code == 200, r.text
    return {x["bucket"]: x for x in r.json()["rows"] if x["op"] == "all_reduce" and x["group_size"] == WORLD}


def test_gloo_baseline_identical_run_and_throttled_run(own_service: Callable[..., ServiceProcess],
                                                       tmp_path: Path) -> None:
    # The alert's fraction is a setting; 0.3 here (0.8 by default) because sub-millisecond gloo
    # all-reduces on a shared 2-core VM put single unthrottled steps as low as ~0.15, while the
    # throttled ones sit at 0.02-0.08: the test is about firing once, not about this VM's noise.
    svc = own_service(FABRICSCOPE_ALERT_BUSBW_STEPS=str(N), FABRICSCOPE_ALERT_BUSBW_FRACTION="0.3")
    rec = Receiver(free_port()).start()
    fabric = unique("gloo-lo")
    try:
        with client(svc.url) as api:
            r = api.post("/v1/webhooks", json={"url": rec.url, "events": ["busbw_below_acceptance"]})
            assert r.status_code == 201, r.text

            # 1. An unthrottled run: its achieved all-reduce busbw per size bucket (median over its
            # collectives, computed by the efficiency endpoint) is imported as the acceptance run.
            # It carries the fabric label as the runs after it do, so the service's alert job
            # (interval 0 here) evaluates it while it runs: on 2 cores that job's CPU is part of
            # what a sub-ms all-reduce measures, and a reference run without it came out up to
            # 3.4x faster at 32 bytes than the identical run beside it.
            ref = unique("ref")
            assert api.put(f"/v1/jobs/{ref}", json={"labels": {"fabric": fabric}}).status_code == 200
            _run(svc, tmp_path / "ref", ref)
            achieved = _all_reduce(api, ref)
            # the model's gradients (8192, 256, 2048, 32 bytes) and the async 400-byte all-reduce
            assert set(achieved) == {32, 256, 2048, 8192}
            assert all(x["fraction"] is None for x in achieved.values())  # no baseline yet: nothing compared
            rows = [{"size_bytes": b, "count": b // 4, "type": "float", "redop": "sum", "root": -1,
                     "placement": "out_of_place", "time_us": 1.0, "algbw_gbps": x["busbw_median_gbps"],
                     "busbw_gbps": x["busbw_median_gbps"], "wrong": 0} for b, x in sorted(achieved.items())]
            post_run(api, run_body(fabric, rows, ranks=WORLD, nodes=1, devices=[], command="train_job.py"))

            # 2. The identical run on that fabric achieves about the baseline and never alerts.
            same = unique("same")
            assert api.put(f"/v1/jobs/{same}", json={"labels": {"fabric": fabric}}).status_code == 200
            _run(svc, tmp_path / "same", same)
            again = _all_reduce(api, same)
            assert set(again) == set(achieved)
            for b, x in again.items():
                assert x["scale"] == "same" and x["baseline_busbw_gbps"] == pytest.approx(
                    achieved[b]["busbw_median_gbps"])
                assert x["fraction"] is not None and x["fraction"] > 0, (b, x)

            # 3. The throttled run: from step 20 rank 0 sleeps 20 ms inside each all-reduce.
            slow = unique("slow")
            assert api.put(f"/v1/jobs/{slow}", json={"labels": {"fabric": fabric}}).status_code == 200
            _run(svc, tmp_path / "slow", slow, "--throttle-from", str(THROTTLE_FROM), "--throttle-s", str(THROTTLE_S))
            fired = wait_for(lambda: alerts(api, slow), what="the busbw alert")
            wait_for(lambda: rec.got, what="its delivery")
            time.sleep(2.0)  # ~6 more runs of the alert job: nothing more may arrive
            assert alerts(api, same) == [] and alerts(api, ref) == []
            fired = alerts(api, slow)
            assert len(fired) == 1, fired
            a = fired[0]
            assert a["kind"] == "busbw_below_acceptance" and a["state"] == "firing"
            assert a["since_step"] <= THROTTLE_FROM <= a["detected_step"] <= THROTTLE_FROM + N - 1
            assert a["last_step"] == STEPS - 1 and a["efficiency"]["fraction"] < 0.2
            docs = [orjson.loads(g.body) for g in rec.got]
            assert [(d["event"], d["status"], d["alert"]["id"]) for d in docs] == [
                ("busbw_below_acceptance", "firing", a["id"])]

            # Over the throttled steps alone the efficiency endpoint says the same.
            throttled = _all_reduce(api, slow, **{"from": a["started_at"]})
            assert set(throttled) == set(achieved) and all(x["fraction"] < 0.2 for x in throttled.values())
            # The identical run's whole-run fraction is a median of noisy sub-ms timings: on a loaded
            # 2-core CI VM it came out from 0.22 (2048 bytes, while the rest of the suite ran) to 3.5
            # (256 bytes), so no absolute band holds; what holds is that it sits far above the
            # throttled steps', which carry 20 ms of sleep in each all-reduce.
            for b, x in again.items():
                assert x["fraction"] > 2 * throttled[b]["fraction"], (b, x["fraction"], throttled[b]["fraction"])
            report = api.get(f"/v1/jobs/{slow}/report", params={"from": a["started_at"]}).json()
            assert len(report["efficiency"]["warnings"]) == 4
    finally:
        rec.stop()
