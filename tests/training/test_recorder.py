"""The recorder in one process: steps, phases, checkpoints, collective wrappers (real gloo, world 1),
never raising, and the standard-library-only import."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.training import Recorder
from tests.sinks.receiver import Receiver
from tests.training.launch import REPO, free_port


@pytest.fixture
def recv() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def make(recv: Receiver, tmp_path: Path, **kw: Any) -> Recorder:
    kw.setdefault("collectives", False)
    return Recorder(recv.url, "unit", rank=0, spool=tmp_path / "spool", env={}, flush_interval_s=0.05, **kw)


def test_importing_the_hook_pulls_in_nothing_but_the_standard_library() -> None:
    code = ("import sys, fabricscope.training, fabricscope.collectors.training.recorder,"
            " fabricscope.collectors.sinks.http;"
            "heavy = {'torch', 'numpy', 'pandas', 'fastapi', 'sqlalchemy', 'pydantic', 'typer', 'httpx'};"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_url_everything_is_a_no_op() -> None:
    rec = Recorder(env={}).start()
    assert not rec.enabled
    with rec.step(1):
        rec.phase("data")
        with rec.checkpoint("/nonexistent"):
            pass
    rec.close()
    assert rec.stats["errors"] == 0 and rec._sender is None


@pytest.mark.parametrize("job", ["team/a", "..", "bad\tname"])
def test_a_job_name_the_service_refuses_disables_the_recorder_at_once(
        job: str, recv: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder(recv.url, job, rank=0, spool=tmp_path, env={}, flush_interval_s=0.05).start()
    with rec.step(1):
        rec.phase("data")
    rec.close()
    assert not rec.enabled and recv.requests == []
    assert any("refuses it" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_step_with_phases_is_posted_in_wall_clock(recv: Receiver, tmp_path: Path) -> None:
    rec = make(recv, tmp_path).start()
    before = time.time()
    with rec.step(7):
        rec.phase("data")
        time.sleep(0.02)
        rec.phase("forward_backward")
        time.sleep(0.05)
        with rec.phase("optimizer"):
            time.sleep(0.01)
        time.sleep(0.02)  # outside any phase: in the step, in no phase
    after = time.time()
    assert rec.flush(5)
    (s,) = recv.items("steps")
    assert s["rank"] == 0 and s["step"] == 7
    assert before <= s["start"] < s["end"] <= after + 1e-3
    ph = s["phases"]
    assert set(ph) == {"data", "forward_backward", "optimizer"}
    assert ph["data"] >= 0.02 and ph["forward_backward"] >= 0.05 and ph["optimizer"] >= 0.01
    assert s["end"] - s["start"] >= sum(ph.values()) + 0.02
    assert recv.posted("steps")[0].body["job"] == "unit"
    rec.close()


def test_a_step_that_raises_is_not_posted_and_the_error_is_the_callers(recv: Receiver, tmp_path: Path) -> None:
    rec = make(recv, tmp_path).start()
    with pytest.raises(ZeroDivisionError), rec.step(1):
        1 / 0  # noqa: B018
    with rec.step(2):
        pass
    rec.flush(5)
    assert [s["step"] for s in recv.items("steps")] == [2]
    rec.close()


def test_checkpoint_event_with_bytes_of_a_sharded_directory(recv: Receiver, tmp_path: Path) -> None:
    rec = make(recv, tmp_path, host="node07").start()
    ck = tmp_path / "ckpt"
    with rec.step(3), rec.checkpoint(ck):
        ck.mkdir()
        (ck / "shard0").write_bytes(b"x" * 1000)
        (ck / "shard1").write_bytes(b"y" * 234)
    with rec.checkpoint():  # outside a step, bytes given by hand
        pass
    rec.checkpoint_begin("/x")
    rec.checkpoint_end(bytes=5)
    rec.flush(5)
    ev = [e for e in recv.items("events") if e["kind"] != "hang_watch"]  # the hook says it sends hang notices (#45)
    assert [e["kind"] for e in ev] == ["checkpoint"] * 3
    assert ev[0]["attrs"] == {"rank": 0, "bytes": 1234, "path": str(ck), "step": 3}
    assert ev[0]["source"].startswith("node07:/") and ev[0]["job"] == "unit"
    assert ev[1]["source"] == "node07" and "bytes" not in ev[1]["attrs"]
    assert ev[2]["attrs"]["bytes"] == 5
    assert recv.items("steps")[0]["phases"]["checkpoint"] > 0
    rec.close()


def test_rank_placement_is_registered_once(recv: Receiver, tmp_path: Path) -> None:
    rec = Recorder(recv.url, "place", rank=3, local_rank=1, host="node07", gpu="gpu1", spool=tmp_path,
                   env={"NCCL_IB_HCA": "=mlx5_2:1"}, collectives=False, job_labels=False,
                   flush_interval_s=0.05).start()
    with rec.step(0):
        pass
    with rec.step(1):
        pass
    rec.flush(5)
    puts = [r for r in recv.requests if r.method == "PUT"]
    assert len(puts) == 1 and puts[0].path == "/v1/jobs/place"
    assert "Content-Encoding" not in puts[0].headers
    entry = puts[0].body["ranks"][0]
    locality = entry.pop("locality")  # #17: this machine's facts (tests/placement has them on recorded trees)
    assert puts[0].body == {"ranks": [{"rank": 3, "host": "node07", "local_rank": 1, "gpu": "gpu1", "nic": "mlx5_2"}]}
    assert locality["nccl_ib_hca"] == "=mlx5_2:1"
    rec.close()


def test_token_from_env_is_used_and_never_shown(recv: Receiver, tmp_path: Path) -> None:
    env = {"FABRICSCOPE_URL": recv.url, "FABRICSCOPE_JOB": "envjob", "FABRICSCOPE_TOKEN": "tok-123",
           "FABRICSCOPE_SPOOL": str(tmp_path), "RANK": "2"}
    rec = Recorder(env=env, collectives=False, flush_interval_s=0.05).start()
    with rec.step(0):
        pass
    rec.flush(5)
    assert recv.posted("steps")[0].headers["Authorization"] == "Bearer tok-123"
    assert recv.items("steps")[0]["rank"] == 2
    assert "tok-123" not in repr(rec) and "tok-123" not in repr(rec._sender)
    rec.close()
    assert rec._sender is not None and rec._sender._spool is not None
    assert rec._sender._spool.path == tmp_path / "envjob.rank2.jsonl"


# -- collectives on a real gloo process group of one rank ------------------------------------------
@pytest.fixture(scope="module")
def gloo() -> Iterator[Any]:
    import torch  # required (torch==2.13.0, CPU wheel): a missing torch fails these tests
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield torch, dist
    dist.destroy_process_group()


def test_collectives_are_timed_with_op_bytes_group_seq_and_step(gloo: Any, recv: Receiver, tmp_path: Path) -> None:
    torch, dist = gloo
    original = dist.all_reduce
    rec = make(recv, tmp_path, collectives=True).start()
    assert dist.all_reduce is not original and dist.all_reduce.__wrapped__ is original
    sub = dist.new_group([0])
    rec.name_group(sub, "dp0")
    with rec.step(5):
        t = torch.ones(1000)
        dist.all_reduce(t)
        dist.broadcast(torch.zeros(10, dtype=torch.float64), src=0)
        dist.all_reduce(torch.ones(3), group=sub)
        w = dist.all_reduce(torch.ones(50), async_op=True)
        w.wait()
        dist.all_gather([torch.zeros(4)], torch.ones(4))
        dist.barrier()
    dist.all_reduce(torch.ones(2))  # outside a step
    assert t[0].item() == 1.0  # the collective itself did its job
    rec.flush(5)
    # sync calls go out from the resolver's ring, an async one when it completes: in order of start
    got = [(c["op"], c["bytes"], c["group"], c["seq"], c.get("step"))
           for c in sorted(recv.items("collectives"), key=lambda c: c["start"])]
    assert got == [
        ("all_reduce", 4000, "world", 1, 5),
        ("broadcast", 80, "world", 2, 5),
        ("all_reduce", 12, "dp0", 1, 5),
        ("all_reduce", 200, "world", 3, 5),
        ("all_gather", 16, "world", 4, 5),
        ("barrier", 0, "world", 5, 5),
        ("all_reduce", 8, "world", 6, None),
    ]
    for c in recv.items("collectives"):
        assert c["group_size"] == 1 and c["rank"] == 0 and 0 <= c["end"] - c["start"] < 5
    rec.close()
    rec._timer_obj.uninstall()  # type: ignore[union-attr]
    assert dist.all_reduce is original


def test_a_second_recorder_never_wraps_a_wrapper(gloo: Any, recv: Receiver, tmp_path: Path) -> None:
    torch, dist = gloo
    original = dist.all_reduce
    r1 = make(recv, tmp_path / "a", collectives=True).start()
    r2 = make(recv, tmp_path / "b", collectives=True).start()
    assert dist.all_reduce.__fabricscope_original__ is original
    r2._timer_obj.uninstall()  # type: ignore[union-attr]
    r1._timer_obj.uninstall()  # type: ignore[union-attr]
    r1.close()
    r2.close()
    assert dist.all_reduce is original


def test_hook_errors_never_reach_the_training_loop(gloo: Any, recv: Receiver, tmp_path: Path) -> None:
    torch, dist = gloo
    rec = make(recv, tmp_path, collectives=True).start()

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("bug in the hook")

    rec._collective_meta = boom  # type: ignore[method-assign]
    rec._timer_obj.group = boom  # type: ignore[method-assign,union-attr]  # both paths: wrapper and flight
    t = torch.ones(4)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    dist.all_reduce(t)
    assert rec.stats["errors"] == 2
    # The collective's own errors still reach the caller.
    with pytest.raises(RuntimeError, match="invalid root rank"):
        dist.broadcast(t, src=7)
    rec.close()
    rec._timer_obj.uninstall()  # type: ignore[union-attr]


@pytest.mark.parametrize("flight", ["0", "1"])
def test_ddp_comm_hook_counts_each_bucket_once(gloo: Any, recv: Receiver, tmp_path: Path, flight: str) -> None:
    """The wrapper path times the bucket in the comm hook; the Flight Recorder path lists it itself
    and the comm hook then adds nothing: one record per bucket either way."""
    torch, dist = gloo
    from torch.nn.parallel import DistributedDataParallel as DDP

    rec = Recorder(recv.url, "unit", rank=0, spool=tmp_path / "spool", env={"FABRICSCOPE_FLIGHT": flight},
                   flush_interval_s=0.05, collectives=True).start()
    assert (rec._flight is not None) == (flight == "1")
    model = DDP(torch.nn.Linear(8, 4))
    model.register_comm_hook(None, rec.ddp_comm_hook())
    for step in range(3):
        with rec.step(step):
            model(torch.randn(2, 8)).sum().backward()
    rec.flush(5)
    got = [(c["op"], c["bytes"], c["step"]) for c in recv.items("collectives") if c["op"] == "all_reduce"]
    assert got == [("all_reduce", (8 * 4 + 4) * 4, s) for s in range(3)]
    rec.close()
    rec._timer_obj.uninstall()  # type: ignore[union-attr]


def test_forked_child_does_not_send_the_parents_items(recv: Receiver, tmp_path: Path) -> None:
    rec = make(recv, tmp_path).start()
    with rec.step(0):
        pass
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say
        ok = rec._sender is not None and rec._sender.submit("steps", {"rank": 0}) is False
        rec.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert rec.flush(5)
    assert [s["step"] for s in recv.items("steps")] == [0]
    rec.close()


def test_sync_collectives_wait_in_a_bounded_ring_with_the_step_they_ran_in(
        gloo: Any, recv: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#45 item 2: a sync CPU collective leaves one tuple in a preallocated ring; the resolver thread
    makes the record. Held off (its lock taken), a ring of 4 keeps 4 calls and counts the rest."""
    from fabricscope.collectors.training import collectives

    torch, dist = gloo
    monkeypatch.setattr(collectives, "_RING", 4)
    rec = make(recv, tmp_path, collectives=True).start()
    timer = rec._timer_obj
    assert timer is not None and len(timer._ring) == 4
    try:
        with timer._drain_lock:  # the resolver cannot drain meanwhile
            with rec.step(7):
                for _ in range(3):
                    dist.all_reduce(torch.ones(2))
            with rec.step(8):  # the records keep the step they were issued in, not the drain's
                for _ in range(7):
                    dist.all_reduce(torch.ones(2))
            assert sum(e is not None for e in timer._ring) == 4 and timer.ring_dropped == 6
        rec.flush(5)
        got = sorted((c["seq"], c["step"]) for c in recv.items("collectives"))
        assert got == [(1, 7), (2, 7), (3, 7), (4, 8)]
        assert rec.stats["dropped"] >= 6 and rec.stats["collectives_recorded"] == 4
        dist.all_reduce(torch.ones(2))  # the ring goes round: slots are free again
        rec.flush(5)
        assert sorted(c["seq"] for c in recv.items("collectives")) == [1, 2, 3, 4, 11]
    finally:
        rec.close()
        timer.uninstall()
