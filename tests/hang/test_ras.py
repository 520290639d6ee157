"""NCCL RAS in the hang answer (service/hang/ras.py) on the real database: which ``nccl_ras`` events
count for a job (its own, or job-less ones from its hosts; each source's newest, recent ones only),
which ranks they name (world-sized communicators), and how they merge with the collective-record
suspects (one entry per rank and group, both facts kept; no longer waiting)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.alerts import payloads
from fabricscope.service.hang import ras
from fabricscope.service.hang.query import job_hang
from fabricscope.service.settings import Settings
from tests.hang.test_alert import _event, _steps

SETTINGS = Settings(hang_floor_s=2.0, hang_factor=5.0)


def _job(conn: psycopg.Connection) -> str:
    """Three ranks on hosts of their own (job-less RAS events are matched by host: shared names would
    make one test's reports another job's), each announcing the hook's notices."""
    job = f"hang-{uuid.uuid4().hex[:8]}"
    conn.execute("INSERT INTO jobs (name) VALUES (%s)", (job,))
    for r in range(3):
        conn.execute("INSERT INTO job_ranks (job, rank, host) VALUES (%s, %s, %s)", (job, r, f"{job}-n{r}"))
        _event(conn, job, "hang_watch", time.time() - 60, {"rank": r})
    return job


def _ras(conn: psycopg.Connection, *, source: str, ts: float, ranks: list[dict[str, Any]], job: str | None) -> None:
    conn.execute("INSERT INTO events (kind, source, job, start_ts, attrs) VALUES ('nccl_ras', %s, %s, "
                 "to_timestamp(%s), %s)", (source, job, ts, Jsonb({"format": "json", "ranks": ranks})))


def rank(r: int, state: str, nranks: int = 3, **kw: Any) -> dict[str, Any]:
    return {"comm": "ae94423cfbb2ef4a", "rank": r, "state": state, "nranks": nranks, **kw}


def test_ras_ranks_join_the_collective_suspects_without_duplicates(db_conn: psycopg.Connection) -> None:
    job = _job(db_conn)  # ranks 0-2 on node0-node2
    _steps(db_conn, job, last_end=time.time() - 5)
    for r in (0, 1):  # ranks 0 and 1 wait in seq 11; rank 2 never entered it
        _event(db_conn, job, "collective_entered", time.time() - 4, {"rank": r, "group": "world", "seq": 11,
                                                                     "op": "all_reduce", "step": 10})
    # RAS on node1 (no job: matched by host) says rank 2 is dead and rank 1 unresponsive;
    # a 2-rank communicator's rank 0 is not the job's rank 0
    _ras(db_conn, source=f"{job}-n1:nccl-ras", ts=time.time() - 1, job=None,
         ranks=[rank(2, "dead", host="10.0.0.2", pid=77), rank(1, "unresponsive"), rank(0, "dead", nranks=2),
                rank(0, "behind")])
    ans = job_hang(db_conn, job=job, settings=SETTINGS)
    assert ans["hung"] and ans["waiting"] == [0]
    assert ans["suspects"] == [
        {"rank": 1, "host": f"{job}-n1", "group": None, "seq": None, "op": None, "state": "ras_unresponsive",
         "source": "nccl_ras", "ras_state": "ras_unresponsive", "ras_comm": "ae94423cfbb2ef4a", "ras_host": None,
         "ras_pid": None},
        {"rank": 2, "host": f"{job}-n2", "group": "world", "seq": 11, "op": "all_reduce", "state": "not_entered",
         "ras_state": "ras_dead", "ras_comm": "ae94423cfbb2ef4a", "ras_host": "10.0.0.2", "ras_pid": 77}]


def test_which_reports_count(db_conn: psycopg.Connection) -> None:
    job = _job(db_conn)
    _steps(db_conn, job, last_end=time.time() - 5)
    now = time.time()
    _ras(db_conn, source="elsewhere:nccl-ras", ts=now, job=None, ranks=[rank(0, "dead")])  # not this job's host
    _ras(db_conn, source=f"{job}-n0:nccl-ras", ts=now - 1000, job=None, ranks=[rank(1, "dead")])  # too old
    _ras(db_conn, source=f"{job}-n2:nccl-ras", ts=now - 10, job=None, ranks=[rank(2, "missing")])
    _ras(db_conn, source=f"{job}-n2:nccl-ras", ts=now - 5, job=None, ranks=[])  # the newest one: cleared
    _ras(db_conn, source="remote:nccl-ras", ts=now - 5, job=job, ranks=[rank(1, "missing")])  # the job named
    _ras(db_conn, source="remote2:nccl-ras", ts=now - 5, job=job, ranks=[rank(1, "dead")])  # graver wins
    got = job_hang(db_conn, job=job, settings=SETTINGS, now=now)["suspects"]
    assert [(s["rank"], s["state"]) for s in got] == [(1, "ras_dead")]
    off = job_hang(db_conn, job=job, settings=Settings(hang_floor_s=2.0, hang_ras_recent_s=0), now=now)
    assert off["hung"] and off["suspects"] == []


def test_not_hung_jobs_name_nobody_whatever_ras_says(db_conn: psycopg.Connection) -> None:
    job = _job(db_conn)
    _steps(db_conn, job, last_end=time.time())
    _ras(db_conn, source=f"{job}-n0:nccl-ras", ts=time.time(), job=job, ranks=[rank(1, "dead")])
    ans = job_hang(db_conn, job=job, settings=SETTINGS)
    assert not ans["hung"] and ans["suspects"] == []


def test_facts_ignore_what_is_not_a_rank_of_the_job() -> None:
    odd = [rank(5, "dead"), rank(-1, "dead"), {"rank": "1", "state": "dead", "nranks": 3}, rank(1, "nocomm"), "x"]
    reports: list[dict[str, Any]] = [{"ranks": odd}, {"ranks": "nope"}, {}]
    assert ras.facts(reports, 3) == {}


def test_the_alert_headline_names_ras_suspects_and_both_facts() -> None:
    suspects = [
        {"rank": 1, "host": "n1", "group": None, "seq": None, "op": None, "state": "ras_dead", "source": "nccl_ras",
         "ras_state": "ras_dead", "ras_comm": "ae94423cfbb2ef4a", "ras_host": None, "ras_pid": None},
        {"rank": 2, "host": "n2", "group": "world", "seq": 11, "op": "all_reduce", "state": "not_entered",
         "ras_state": "ras_unresponsive", "ras_comm": "ae94423cfbb2ef4a", "ras_host": None, "ras_pid": None}]
    alert = {"kind": payloads.HANG_KIND, "job": "j", "started_at": "t", "hang": {"suspects": suspects}}
    got = payloads.generic(alert, status="firing", key="k", now=datetime.now(UTC))["summary"]
    assert got == ("[firing] job j: hung, no step since t; rank 1 (n1) ras_dead (NCCL RAS, communicator "
                   "ae94423cfbb2ef4a); rank 2 (n2) not_entered all_reduce group world seq 11, "
                   "NCCL RAS ras_unresponsive")
