"""Real multi-process training (torch.distributed, gloo, CPU) with the hook on, posting to the real
fabricscope service; what lands in PostgreSQL is compared with what the ranks actually did."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
import torch  # noqa: F401 - required (torch==2.13.0, CPU wheel): fail loudly if it is missing

from fabricscope.collectors.sinks.http import HttpSender
from tests.support import start_service
from tests.training.launch import free_port, run_job, start_job, wait_job

pytestmark = pytest.mark.slow

P2P = {"send", "recv"}


def job_name() -> str:
    return f"gloo-{uuid.uuid4().hex[:8]}"


def hook_env(url: str, job: str, spool: Path) -> dict[str, str]:
    return {"FABRICSCOPE_URL": url, "FABRICSCOPE_JOB": job, "FABRICSCOPE_SPOOL": str(spool)}


def rows(conn: psycopg.Connection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


def db_steps(conn: psycopg.Connection, job: str) -> dict[tuple[int, int], tuple[float, dict[str, float]]]:
    out = {}
    for rank, step, dur, phases in rows(conn, "SELECT rank, step, duration_s, phases FROM steps WHERE job = %s", job):
        assert (rank, step) not in out, f"step {step} of rank {rank} stored twice"
        out[(rank, step)] = (dur, phases or {})
    return out


def db_collectives(conn: psycopg.Connection, job: str) -> dict[int, list[tuple[Any, ...]]]:
    per_rank: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for r in rows(conn, "SELECT rank, step, seq, op, bytes, duration_s, group_name, group_size FROM collectives"
                        " WHERE job = %s AND step IS NOT NULL ORDER BY rank, start_ts", job):
        per_rank[r[0]].append(r[1:])
    return per_rank


def test_gloo_job_steps_collectives_placement_and_a_straggler(
    service_url: str, db_conn: psycopg.Connection, tmp_path: Path
) -> None:
    job, world, steps, slow_rank, slow_step, sleep = job_name(), 3, 24, 1, 12, 0.3
    outs = run_job(world, tmp_path, ["--steps", str(steps), "--mode", "explicit", "--slow-rank", str(slow_rank),
                                     "--slow-step", str(slow_step), "--sleep", str(sleep),
                                     "--checkpoint-dir", str(tmp_path)],
                   hook_env(service_url, job, tmp_path / "spool"))
    for o in outs:
        st = o["stats"]
        assert st["dropped"] == 0 and st["spooled"] == 0 and st["errors"] == 0, st
        assert st["collectives_recorded"] == len(o["issued"]) + 1  # + the closing barrier outside steps

    # Steps: every (rank, step) exactly once, with the phases the script marked.
    stored = db_steps(db_conn, job)
    assert set(stored) == {(r, s) for r in range(world) for s in range(steps)}
    for (rank, step), (dur, phases) in stored.items():
        assert dur > 0
        ckpt = {"checkpoint"} if (rank, step) == (0, steps - 1) else set()  # saved inside the last step
        assert set(phases) == {"data", "forward_backward", "communication", "optimizer"} | ckpt
        assert sum(phases.values()) <= dur + 1e-6

    # Collectives: per rank the same ops, bytes and order as issued; one group, consistent seq.
    colls = db_collectives(db_conn, job)
    for o in outs:
        got = [(step, op, nbytes) for step, _seq, op, nbytes, *_ in colls[o["rank"]]]
        assert got == [(i["step"], i["op"], i["bytes"]) for i in o["issued"]]
        assert {(g, size) for *_, g, size in colls[o["rank"]]} == {("world", world)}
    same = [{(step, seq, op, nbytes) for step, seq, op, nbytes, *_ in colls[r] if op not in P2P}
            for r in range(world)]
    assert same[0] == same[1] == same[2]  # (group, seq) names one collective on every rank
    seqs = [seq for _step, seq, op, *_ in colls[0] if op not in P2P]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))

    # Placement: registered by every rank at start.
    placed = rows(db_conn, "SELECT rank, host, local_rank, nic FROM job_ranks WHERE job = %s ORDER BY rank", job)
    assert placed == [(r, socket.gethostname(), r, "lo") for r in range(world)]

    # The straggler: its compute phase is long, the others wait in the next collective.
    fb = {r: stored[(r, slow_step)][1]["forward_backward"] for r in range(world)}
    assert fb[slow_rank] >= sleep
    assert all(fb[r] < fb[slow_rank] - sleep * 0.6 for r in range(world) if r != slow_rank)
    first_ar = {r: next(d for step, _s, op, _b, d, *_ in colls[r] if step == slow_step and op == "all_reduce")
                for r in range(world)}
    assert all(first_ar[r] >= sleep * 0.6 for r in range(world) if r != slow_rank), first_ar
    assert all(first_ar[slow_rank] < first_ar[r] - sleep * 0.5 for r in range(world) if r != slow_rank)

    # The checkpoint: one event with the bytes written.
    ev = rows(db_conn, "SELECT source, attrs FROM events WHERE job = %s AND kind = 'checkpoint'", job)
    assert len(ev) == 1
    source, attrs = ev[0]
    assert source.startswith(socket.gethostname() + ":/")
    assert attrs["bytes"] == (tmp_path / f"step{steps - 1}.pt").stat().st_size and attrs["step"] == steps - 1


def test_ddp_comm_hook_times_every_bucket(service_url: str, db_conn: psycopg.Connection, tmp_path: Path) -> None:
    job, world, steps = job_name(), 2, 16
    outs = run_job(world, tmp_path, ["--steps", str(steps), "--mode", "ddp"],
                   hook_env(service_url, job, tmp_path / "spool"))
    colls = db_collectives(db_conn, job)
    for o in outs:
        assert o["stats"]["dropped"] == 0
        got = [(step, op, nbytes) for step, _seq, op, nbytes, *_ in colls[o["rank"]]]
        # The Flight Recorder path also lists DDP's own broadcasts when it rebuilds its buckets after
        # the first step (the comm hook never saw them); nothing else is added.
        own = [g for g in got if g[:2] == (1, "broadcast")]
        assert len(own) in (0, 2)
        got = [g for g in got if g not in own]
        assert got == [(i["step"], i["op"], i["bytes"]) for i in o["issued"]]
        assert len(got) == steps  # one bucket per step for this model, none counted twice
    assert [c[1] for c in colls[0]] == [c[1] for c in colls[1]]


def test_service_killed_mid_run_spools_and_replays(database_url: str, db_conn: psycopg.Connection,
                                                    tmp_path: Path) -> None:
    job, world, steps = job_name(), 2, 30
    port = free_port()
    svc = start_service(database_url, tmp_path, port=port)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    procs = start_job(world, tmp_path, ["--steps", str(steps), "--extra-every", "0", "--control-dir", str(ctl),
                                        "--pause-at", "10,20"],
                      hook_env(f"http://127.0.0.1:{port}", job, tmp_path / "spool"))
    services = [svc]

    def conduct() -> None:
        wait_until(ctl / "at-10")
        services[0].stop()  # killed mid-run
        (ctl / "go-10").touch()
        wait_until(ctl / "at-20")
        for r in range(world):  # the outage lasts until every rank has given up retrying and spooled
            f = tmp_path / "spool" / f"{job}.rank{r}.jsonl"
            wait_until(f, check=lambda f=f: f.stat().st_size > 0)
        services.append(start_service(database_url, tmp_path, port=port))  # back on the same port
        (ctl / "go-20").touch()

    t = threading.Thread(target=conduct, daemon=True)
    t.start()
    try:
        outs = wait_job(procs, tmp_path)
    finally:
        t.join(60)
        for s in services:
            s.stop()
    for o in outs:
        st = o["stats"]
        assert st["spooled"] > 0, st  # the outage was real and seen
        assert st["replayed"] == st["spooled"] and st["dropped"] == 0, st
    stored = db_steps(db_conn, job)
    assert set(stored) == {(r, s) for r in range(world) for s in range(steps)}
    colls = db_collectives(db_conn, job)
    for o in outs:
        assert [(c[0], c[2], c[3]) for c in colls[o["rank"]]] == [(i["step"], i["op"], i["bytes"]) for i in o["issued"]]


def test_service_down_for_the_whole_run_then_replayed(database_url: str, db_conn: psycopg.Connection,
                                                      tmp_path: Path) -> None:
    job, world, steps = job_name(), 2, 15
    port = free_port()  # nothing listens there during training
    spool = tmp_path / "spool"
    t0 = time.monotonic()
    outs = run_job(world, tmp_path, ["--steps", str(steps)], hook_env(f"http://127.0.0.1:{port}", job, spool))
    assert time.monotonic() - t0 < 120  # training was not held up by the missing service
    for o in outs:
        st = o["stats"]
        assert st["sent"] == 0 and st["dropped"] == 0
        # steps, collectives, barrier, placement, and the hook's hang_watch and rank_exit notices (#45)
        assert st["spooled"] == steps + len(o["issued"]) + 1 + 1 + 2
    assert db_steps(db_conn, job) == {}
    files = sorted(spool.glob(f"{job}.rank*.jsonl"))
    assert [f.name for f in files] == [f"{job}.rank0.jsonl", f"{job}.rank1.jsonl"]

    svc = start_service(database_url, tmp_path, port=port)
    try:
        for f in files:  # what `fabricscope import spool FILE` does
            s = HttpSender(f"http://127.0.0.1:{port}", spool_path=f)
            assert s.flush(60)
            s.close()
            assert s.stats["replayed"] == outs[int(f.name.split(".rank")[1][0])]["stats"]["spooled"]
    finally:
        svc.stop()
    assert set(db_steps(db_conn, job)) == {(r, s) for r in range(world) for s in range(steps)}
    assert len(rows(db_conn, "SELECT 1 FROM job_ranks WHERE job = %s", job)) == world


def wait_until(path: Path, timeout: float = 120, check: Any = None) -> None:
    t0 = time.monotonic()
    while not path.exists() or (check is not None and not check()):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(path)
        time.sleep(0.02)
