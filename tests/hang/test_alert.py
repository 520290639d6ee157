"""The job_hang alert's episode on the real database (service/hang/alert.py): it fires once with the
suspects, fills them in when the in-flight notices arrive after the firing, and resolves when steps
arrive again; jobs that never announced the notices, or ended, are not judged."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.hang.alert import run_once
from fabricscope.service.hang.query import job_hang
from fabricscope.service.settings import Settings

SETTINGS = Settings(hang_floor_s=2.0, hang_factor=5.0)


def _job(conn: psycopg.Connection, *, watch: bool = True) -> str:
    job = f"hang-{uuid.uuid4().hex[:8]}"
    conn.execute("INSERT INTO jobs (name) VALUES (%s)", (job,))
    for r in range(3):
        conn.execute("INSERT INTO job_ranks (job, rank, host) VALUES (%s, %s, %s)", (job, r, f"node{r}"))
        if watch:
            _event(conn, job, "hang_watch", time.time() - 60, {"rank": r})
    return job


def _event(conn: psycopg.Connection, job: str, kind: str, ts: float, attrs: dict[str, Any]) -> None:
    conn.execute("INSERT INTO events (kind, source, job, start_ts, attrs) VALUES (%s, 'h', %s, to_timestamp(%s), %s)",
                 (kind, job, ts, Jsonb(attrs)))


def _steps(conn: psycopg.Connection, job: str, *, last_end: float, n: int = 10, dur: float = 0.1) -> None:
    for i in range(n):
        end = last_end - (n - 1 - i) * dur
        for r in range(3):
            conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s) VALUES "
                         "(%s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s)", (job, r, i, end - dur, end, dur))
            conn.execute("INSERT INTO collectives (job, rank, step, seq, op, start_ts, end_ts, duration_s, group_name)"
                         " VALUES (%s, %s, %s, %s, 'all_reduce', to_timestamp(%s), to_timestamp(%s), 0.01, 'world')",
                         (job, r, i, i + 1, end - 0.01, end))


def _alerts(conn: psycopg.Connection, job: str) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT state, summary FROM alerts WHERE job = %s AND kind = 'job_hang' ORDER BY id",
                        (job,)).fetchall()


def test_one_alert_per_episode_suspects_filled_in_and_resolved_when_steps_resume(db_conn: psycopg.Connection) -> None:
    job = _job(db_conn)
    _steps(db_conn, job, last_end=time.time() - 5)  # 5 s without a step; threshold max(2, 5 x 0.1) = 2 s
    run_once(db_conn, settings=SETTINGS)
    ((state, summary),) = _alerts(db_conn, job)
    assert state == "firing" and summary["suspects"] == [] and summary["threshold_s"] == 2.0
    # ranks 0 and 1 report they are inside seq 11; rank 2 never entered it
    for r in (0, 1):
        _event(db_conn, job, "collective_entered", time.time() - 4, {"rank": r, "group": "world", "seq": 11,
                                                                     "op": "all_reduce", "step": 10})
    run_once(db_conn, settings=SETTINGS)
    run_once(db_conn, settings=SETTINGS)
    ((state, summary),) = _alerts(db_conn, job)
    assert state == "firing" and summary["waiting"] == [0, 1]
    assert summary["suspects"] == [{"rank": 2, "host": "node2", "group": "world", "seq": 11, "op": "all_reduce",
                                    "state": "not_entered"}]
    db_conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s) VALUES "
                    "(%s, 0, 10, now() - interval '1 second', now(), 1.0)", (job,))
    run_once(db_conn, settings=SETTINGS)
    assert [a[0] for a in _alerts(db_conn, job)] == ["resolved"]


def test_unannounced_and_ended_jobs_are_not_hung(db_conn: psycopg.Connection) -> None:
    quiet = _job(db_conn, watch=False)  # imported or simulated steps: no hook notices
    _steps(db_conn, quiet, last_end=time.time() - 30)
    ended = _job(db_conn)
    _steps(db_conn, ended, last_end=time.time() - 30)
    for r in range(3):
        _event(db_conn, ended, "rank_exit", time.time() - 29, {"rank": r})
    run_once(db_conn, settings=SETTINGS)
    assert _alerts(db_conn, quiet) == [] and _alerts(db_conn, ended) == []
    assert not job_hang(db_conn, job=ended, settings=SETTINGS)["hung"]
    # two of three exited: the third is still in there, the job is hung
    partial = _job(db_conn)
    _steps(db_conn, partial, last_end=time.time() - 30)
    for r in range(2):
        _event(db_conn, partial, "rank_exit", time.time() - 29, {"rank": r})
    assert job_hang(db_conn, job=partial, settings=SETTINGS)["hung"]
