"""The phases the engine reads (data, forward/backward, optimizer, checkpoint) kept as columns beside
the `phases` object (migration 0011): the writer fills them, and the engine's readers give the same
values for a row written before the columns existed (NULL there: read from `phases`). Real database."""

from __future__ import annotations

import json
import math
import uuid

import psycopg

from fabricscope.service.correlate import queries as q
from fabricscope.service.db.writer import STEP_PHASE_COLUMNS, phase_values, write_steps

T0 = 1.79e9  # a time range no other test of this database uses
PHASES = [
    {"data": 0.1, "forward_backward": 1.2345678901234567, "optimizer": 0.2, "checkpoint": 0.75},
    {"data": 1e-7, "forward_backward": 2, "optimizer": 0.3, "checkpoint": 0.0, "custom": 9.0},
    {"data": 0.3},  # a hook that times its data phase only
    None,  # a job that records no phases
]


def test_phase_values_follow_the_columns_and_leave_absent_phases_empty() -> None:
    assert phase_values(PHASES[0]) == (0.1, 1.2345678901234567, 0.2, 0.75)
    assert phase_values(PHASES[2]) == (0.3, None, None, None)
    assert phase_values(None) == (None,) * len(STEP_PHASE_COLUMNS)


def test_rows_with_and_without_the_columns_read_the_same(db_conn: psycopg.Connection) -> None:
    jobs = {how: f"phases-{how}-{uuid.uuid4().hex[:6]}" for how in ("written", "legacy")}
    with db_conn.transaction():
        write_steps(db_conn, job=jobs["written"], rows=[(r, 3, T0 + r, T0 + r + 2.5, p) for r, p in enumerate(PHASES)])
        for r, p in enumerate(PHASES):  # as a database upgraded from 0010 holds them: the object alone
            db_conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s, phases) VALUES"
                            " (%s, %s, 3, to_timestamp(%s), to_timestamp(%s), 2.5, %s)",
                            (jobs["legacy"], r, T0 + r, T0 + r + 2.5, None if p is None else json.dumps(p)))
    cols = db_conn.execute(f"SELECT {', '.join(STEP_PHASE_COLUMNS.values())} FROM steps WHERE job = %s ORDER BY rank",
                           (jobs["written"],)).fetchall()
    assert cols == [phase_values(p) for p in PHASES]
    assert db_conn.execute("SELECT count(*) FROM steps WHERE job = %s AND data_s IS NULL",
                           (jobs["legacy"],)).fetchone() == (4,)
    got = {}
    for how, job in jobs.items():
        ranks, _ = q.rank_rows(db_conn, job=job, step=3)
        summary = q.step_summaries(db_conn, job=job, lo=3, hi=3)
        got[how] = (ranks.sort_values("rank")[["data", "fb", "opt", "ckpt"]].to_numpy().tolist(),
                    summary[["ckpt_max", "ckpt_med", "data"]].to_numpy().tolist())
    same = [[a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(x, y, strict=True)]
            for x, y in zip(got["written"][0], got["legacy"][0], strict=True)]
    assert all(all(r) for r in same), got
    assert got["written"][1] == got["legacy"][1]
    assert got["written"][0][0] == [0.1, 1.2345678901234567, 0.2, 0.75]
    assert got["written"][1][0][0] == 0.75  # the checkpoint's max; its median over 4 ranks is 0.0-0.75's


def test_rank_rows_take_each_ranks_placement_from_the_job_and_none_for_an_unplaced_rank(
        db_conn: psycopg.Connection) -> None:
    """The placement is joined in pandas (the planner, with statistics from before a large job's ranks
    were stored, looped over them for each rank): given or read, the same rows; an unplaced rank's
    host, GPU and NIC are None, as a LEFT JOIN gave."""
    job = f"placed-{uuid.uuid4().hex[:6]}"
    with db_conn.transaction():
        db_conn.execute("INSERT INTO jobs (name) VALUES (%s)", (job,))
        db_conn.execute("INSERT INTO job_ranks (job, rank, host, gpu, nic) VALUES (%s, 0, 'h1', 'h1:gpu0', NULL),"
                        " (%s, 1, 'h1', 'h1:gpu1', 'h1:mlx5_1')", (job, job))
        write_steps(db_conn, job=job, rows=[(r, 5, T0 + 100 + r, T0 + 102 + r, PHASES[0]) for r in range(3)])
    read, _ = q.rank_rows(db_conn, job=job, step=5)
    given, _ = q.rank_rows(db_conn, job=job, step=5, placement=q.job_ranks(db_conn, job=job))
    for got in (read, given):
        rows = got.sort_values("rank")[["rank", "host", "gpu", "nic"]].to_numpy().tolist()
        assert rows == [[0, "h1", "h1:gpu0", None], [1, "h1", "h1:gpu1", "h1:mlx5_1"], [2, None, None, None]], rows
    assert list(read.columns) == ["rank", "dur", "data", "fb", "opt", "ckpt", "host", "gpu", "nic"]
