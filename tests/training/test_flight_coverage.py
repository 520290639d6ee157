"""Coverage through the Flight Recorder (#45): a real 2-rank gloo job issues collectives that no
Python wrapper sees (DDP's C++ bucket all-reduce without a comm hook, a torch.compile'd functional
all-reduce, a name bound before the hook started); every one of them reaches the real service, once,
in its step, with bytes as issued and the same (group, seq) on every rank.

With the wrapper only (``FABRICSCOPE_FLIGHT=0``, the hook before #45) none of the three arrives."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from pathlib import Path

import psycopg
import pytest

from tests.training.launch import run_job

pytestmark = pytest.mark.slow

JOB_SCRIPT = Path(__file__).with_name("flight_job.py")


def stored(conn: psycopg.Connection, job: str) -> list[tuple[int, int, int, str, int, str, int, float]]:
    return conn.execute("SELECT rank, step, seq, op, bytes, group_name, group_size, duration_s FROM collectives"
                        " WHERE job = %s AND step IS NOT NULL ORDER BY rank, start_ts", (job,)).fetchall()


def test_every_collective_arrives_with_matching_seq(service_url: str, db_conn: psycopg.Connection,
                                                    tmp_path: Path) -> None:
    job, world, steps = f"flight-{uuid.uuid4().hex[:8]}", 2, 3
    env = {"FABRICSCOPE_URL": service_url, "FABRICSCOPE_JOB": job, "FABRICSCOPE_SPOOL": str(tmp_path / "spool"),
           "FABRICSCOPE_FLIGHT": "1", "FABRICSCOPE_FLIGHT_INTERVAL_S": "0.05"}
    outs = run_job(world, tmp_path, ["--steps", str(steps)], env, timeout=120, script=JOB_SCRIPT)
    rows = stored(db_conn, job)
    for o in outs:
        st = o["stats"]
        mine = [r for r in rows if r[0] == o["rank"]]
        # every issued collective, once, in its step, bytes as issued (DDP's bucket, compiled, early-bound);
        # besides them only DDP's own broadcasts when it rebuilds its buckets after the first step
        got, issued = Counter((r[1], r[3], r[4]) for r in mine), Counter(tuple(i) for i in o["issued"])
        assert got & issued == issued, issued - got
        assert {(step, op) for step, op, _b in got - issued} <= {(1, "broadcast")}, got - issued
        assert st["errors"] == 0 and st["dropped"] == 0, st
        assert st["flight_missed"] == 0 and st["flight_unmapped"] == 0, st
        assert all(r[5] == "world" and r[6] == world and r[7] >= 0 for r in mine)
        assert len({r[2] for r in mine}) == len(mine)  # one record per seq
    by_seq: dict[tuple[str, int], set[tuple[int, str, int]]] = defaultdict(set)
    ranks: dict[tuple[str, int], set[int]] = defaultdict(set)
    for rank, step, seq, op, nbytes, group, _size, _dur in rows:
        by_seq[(group, seq)].add((step, op, nbytes))
        ranks[(group, seq)].add(rank)
    assert len(by_seq) == len(rows) // world >= 3 * steps
    for key in by_seq:  # (group, seq) names one collective on every rank: same step, op and bytes
        assert ranks[key] == set(range(world)) and len(by_seq[key]) == 1, (key, by_seq[key], ranks[key])
