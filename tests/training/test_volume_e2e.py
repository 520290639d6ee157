"""Bounded collective volume end to end (#45 item 3): a real 4-rank gloo job with
FABRICSCOPE_COLLECTIVE_DETAIL=bounded against the real service. Healthy steps arrive as summaries plus
the one sampled rank's records; a step made slow arrives in full from every rank; a step the service
asks for while the job runs is sent late from the hook's history; summaries match the records."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import torch  # noqa: F401 - required (torch==2.13.0, CPU wheel)

from tests.training.launch import start_job, wait_job
from tests.training.test_multiprocess import job_name

pytestmark = pytest.mark.slow

WORLD, STEPS, SLOW_STEP, PAUSE_AFTER, FACTOR = 4, 30, 15, 24, 1.5
SCRIPT = Path(__file__).with_name("volume_job.py")


def _rows(conn: psycopg.Connection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


def _detailed(conn: psycopg.Connection, job: str) -> dict[tuple[int, int], list[tuple[Any, ...]]]:
    out: dict[tuple[int, int], list[tuple[Any, ...]]] = defaultdict(list)
    for rank, step, dur, nbytes in _rows(conn, "SELECT rank, step, duration_s, bytes FROM collectives"
                                               " WHERE job = %s AND step IS NOT NULL", job):
        out[(rank, step)].append((dur, nbytes))
    return out


def _wait(what: str, ready: Any, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while not ready():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.2)


def _slow_here(conn: psycopg.Connection, job: str) -> set[tuple[int, int]]:
    """The hook's own rule on the stored step times: over FACTOR x the median of the previous 32 (5 at least)."""
    out = set()
    for rank in range(WORLD):
        durs = [d for (d,) in _rows(conn, "SELECT duration_s FROM steps WHERE job = %s AND rank = %s ORDER BY step",
                                    job, rank)]
        for step, d in enumerate(durs):
            prev = durs[max(0, step - 32):step]
            if len(prev) >= 5 and d > FACTOR * statistics.median(prev):
                out.add((rank, step))
    return out


def test_bounded_detail_end_to_end(service_url: str, db_conn: psycopg.Connection, tmp_path: Path) -> None:
    job = job_name()
    env = {"FABRICSCOPE_URL": service_url, "FABRICSCOPE_JOB": job, "FABRICSCOPE_SPOOL": str(tmp_path / "spool"),
           "FABRICSCOPE_COLLECTIVE_DETAIL": "bounded", "FABRICSCOPE_DETAIL_SLOW_FACTOR": str(FACTOR),
           "FABRICSCOPE_DETAIL_POLL_S": "0.5", "FABRICSCOPE_DETAIL_SETTLE_S": "0.2"}
    procs = start_job(WORLD, tmp_path, ["--steps", str(STEPS), "--slow-step", str(SLOW_STEP), "--slow-rank", "2",
                                        "--sleep", "0.6", "--pause-after", str(PAUSE_AFTER),
                                        "--control-dir", str(tmp_path)], env, script=SCRIPT)
    try:
        _wait("every rank's summary of the step before the pause", lambda: _rows(
            db_conn, "SELECT count(DISTINCT rank) FROM collective_summaries WHERE job = %s AND step = %s",
            job, PAUSE_AFTER)[0][0] == WORLD, timeout=45)
        # a healthy step that only its sampled rank sent in full: the service asks for it now
        detailed = _detailed(db_conn, job)
        asked = next(s for s in range(PAUSE_AFTER, SLOW_STEP, -1)
                     if sum((r, s) in detailed for r in range(WORLD)) == 1)
        r = httpx.post(f"{service_url}/v1/jobs/{job}/detail_requests", json={"steps": [asked], "reason": "test"})
        assert r.status_code == 201, r.text
        _wait("the asked step from every rank", lambda: len(
            {k[0] for k in _detailed(db_conn, job) if k[1] == asked}) == WORLD)
        assert not (tmp_path / "go").exists()  # sent from the history while the job was still paused
    finally:
        (tmp_path / "go").write_text("")
    outs = wait_job(procs, tmp_path, timeout=60)

    detailed = _detailed(db_conn, job)
    slow = _slow_here(db_conn, job)
    assert {(r, SLOW_STEP) for r in range(WORLD)} <= slow  # the slow step was slow on every rank
    for rank in range(WORLD):
        for step in range(STEPS):
            sampled = (rank + step) % WORLD == 0  # 1 in min(16, world)
            want = sampled or (rank, step) in slow or step == asked
            assert ((rank, step) in detailed) == want, (rank, step, sampled, (rank, step) in slow)

    sums = {(r, s): (n, t, b) for r, s, n, t, b in _rows(
        db_conn, "SELECT rank, step, sum(count), sum(total_s), sum(bytes) FROM collective_summaries"
                 " WHERE job = %s GROUP BY 1, 2", job)}
    for o in outs:
        st, rank = o["stats"], o["rank"]
        assert st["dropped"] == 0 and st["errors"] == 0 and st["detail_polls_failed"] == 0, st
        for step, n in o["issued"].items():  # every step summarized, every collective counted
            assert sums[(rank, int(step))][0] == n
    for key, recs in detailed.items():  # where both exist, the summary is the records' sum
        n, total, nbytes = sums[key]
        assert n == len(recs)
        assert total == pytest.approx(sum(d for d, _ in recs), rel=1e-6, abs=1e-6)
        assert nbytes == sum(b for _, b in recs)
    # volume: 3 summary rows a rank and step (two all-reduce buckets, one all_gather) in place of 7
    # records, and the records of the rank-steps above only (how many were slow depends on this
    # machine's noise; bench/volume_rows.py measures the rows)
    n_sums = _rows(db_conn, "SELECT count(*) FROM collective_summaries WHERE job = %s", job)[0][0]
    assert n_sums == WORLD * STEPS * 3
    assert sum(len(v) for v in detailed.values()) == 7 * len(detailed)
