"""Hangs on a real 4-rank gloo job with the hook, posting to the real service (#45 item 4).

One rank sleeps forever before an all-reduce: the `job_hang` alert, through a real webhook
receiver, names that rank and the collective the others wait in (group, seq, op) within twice the
hang threshold. A job with a checkpoint longer than the threshold does not alert."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.alerts.conftest import ADMIN, client
from tests.alerts.receiver import Receiver, free_port
from tests.support import ServiceProcess
from tests.training.launch import start_job, wait_job
from tools.grafana_sql import Context, expand, load_dashboards, queries

pytestmark = pytest.mark.slow

JOB_SCRIPT = Path(__file__).with_name("hang_job.py")
WORLD, FLOOR_S = 4, 4.0
SERVICE_ENV = {"FABRICSCOPE_HANG_FLOOR_S": str(FLOOR_S), "FABRICSCOPE_HANG_FACTOR": "5"}


def hook_env(url: str, job: str, workdir: Path) -> dict[str, str]:
    return {"FABRICSCOPE_URL": url, "FABRICSCOPE_JOB": job, "FABRICSCOPE_SPOOL": str(workdir / "spool"),
            "FABRICSCOPE_TOKEN": ADMIN, "FABRICSCOPE_INFLIGHT_S": "0.5"}


def until(fn: Callable[[], Any], *, timeout: float, what: str) -> Any:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = fn()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout}s")


def kill(procs: list[Any]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(10)


def panel_rows(db_url: str, job: str) -> list[dict[str, Any]]:
    """The Job overview dashboard's hang panel, as Grafana expands it, on the test's database."""
    (q,) = [q for q in queries("job-overview.json", load_dashboards()["job-overview.json"])
            if q.where == "panel 'Hang: suspects' A"]
    now = datetime.now().astimezone()
    with psycopg.connect(db_url, autocommit=True) as conn:
        cur = conn.execute(expand(q.sql, Context(now, now, {"job": [job]})))
        cols = [d.name for d in cur.description or []]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_the_rank_that_never_enters_the_all_reduce_is_named(make_service: Callable[..., ServiceProcess],
                                                            own_db: str, tmp_path: Path) -> None:
    svc = make_service(**SERVICE_ENV)
    rec = Receiver(free_port()).start()
    job, block_step, marker = f"hang-{uuid.uuid4().hex[:8]}", 8, tmp_path / "blocked"
    procs: list[Any] = []
    try:
        with client(svc.url) as api:
            assert api.post("/v1/webhooks", json={"url": rec.url, "events": ["job_hang"]}).status_code == 201
            procs = start_job(WORLD, tmp_path, ["--steps", "40", "--block-rank", "3", "--block-step",
                                                str(block_step), "--marker", str(marker)],
                              hook_env(svc.url, job, tmp_path), script=JOB_SCRIPT)
            until(marker.exists, timeout=60, what="blocked rank")
            blocked_at = float(marker.read_text())
            until(lambda: rec.got, timeout=30, what="job_hang notification")
            doc = orjson.loads(rec.got[0].body)
            assert (doc["event"], doc["status"]) == ("job_hang", "firing")
            hang = doc["alert"]["hang"]
            # seq counts from 1 per group: step k's all-reduce is seq k + 1 in the world group
            assert [{k: s[k] for k in ("rank", "group", "seq", "op", "state")} for s in hang["suspects"]] == [
                {"rank": 3, "group": "world", "seq": block_step + 1, "op": "all_reduce", "state": "not_entered"}]
            assert hang["suspects"][0]["host"]
            assert hang["waiting"] == [0, 1, 2]
            assert "rank 3" in doc["summary"] and "seq 9" in doc["summary"]
            threshold = hang["threshold_s"]
            assert threshold == FLOOR_S  # 5 x a ~50 ms median step is below the floor
            (listed,) = api.get("/v1/alerts", params={"job": job}).json()
            assert listed["kind"] == "job_hang" and listed["hang"]["suspects"][0]["rank"] == 3
            detected = listed["detected_at"]
            lag = datetime.fromisoformat(detected).timestamp() - blocked_at
            print(f"job_hang detected {lag:.2f} s after the rank blocked; threshold {threshold} s")
            assert 0 < lag <= 2 * threshold, lag
            r = api.get(f"/v1/jobs/{job}/hang")
            assert r.status_code == 200 and r.json()["hung"] and r.json()["suspects"][0]["rank"] == 3
            (row,) = panel_rows(own_db, job)  # the dashboard panel shows the alert's answer
            assert (row["status"], row["rank"], row["group"], row["seq"], row["op"], row["state"], row["waiting"]) == (
                "hung", 3, "world", block_step + 1, "all_reduce", "not_entered", "0, 1, 2")
            assert (row["source"], row["ras_state"]) == ("collectives", None)  # no NCCL RAS on gloo
            assert panel_rows(own_db, "no-such-job") == [dict.fromkeys(row, None) | {"status": "not hung"}]
            time.sleep(1.0)  # more alert runs: one episode, one notification
            assert len(rec.got) == 1
            assert api.get("/v1/jobs/no-such-job/hang").status_code == 404
            bad = api.get("/v1/jobs/a%01b/hang")
            assert bad.status_code == 422 and "job" in bad.text
    finally:
        kill(procs)
        rec.stop()


def test_a_long_checkpoint_that_completes_is_not_a_hang(make_service: Callable[..., ServiceProcess],
                                                        tmp_path: Path) -> None:
    svc = make_service(**SERVICE_ENV)
    job, ckpt_s = f"ckpt-{uuid.uuid4().hex[:8]}", 2.5 * FLOOR_S
    procs = start_job(WORLD, tmp_path, ["--steps", "12", "--ckpt-step", "5", "--ckpt-s", str(ckpt_s)],
                      hook_env(svc.url, job, tmp_path), script=JOB_SCRIPT)
    try:
        with client(svc.url) as api:
            seen: list[tuple[float, dict[str, Any]]] = []

            def checkpointing() -> bool:
                r = api.get(f"/v1/jobs/{job}/hang")
                if r.status_code == 200 and r.json()["checkpoint_since"]:
                    seen.append((time.time(), r.json()))
                return len(seen) > 0 and all(p.poll() is not None for p in procs)

            until(checkpointing, timeout=80, what="job end")
            wait_job(procs, tmp_path, timeout=10)
            time.sleep(FLOOR_S + 1.0)  # past the threshold after the last step: an ended job is no hang
            assert not [s for _, s in seen if s["hung"]]
            # it was looked at while the steps had stopped for longer than the threshold
            stalled = [t - datetime.fromisoformat(s["last_step_end"]).timestamp() for t, s in seen]
            assert max(stalled) > seen[0][1]["threshold_s"] + 1.0, stalled
            last = api.get(f"/v1/jobs/{job}/hang").json()
            assert last["watched"] and last["ended"] and not last["hung"]
            assert api.get("/v1/alerts", params={"job": job}).json() == []
    finally:
        kill(procs)
