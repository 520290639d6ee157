"""Bounded collective volume on the hook's side (collectors/training/volume.py): summaries, the slow
flag, the rotating sample, late requests from the history, eviction counts."""

from __future__ import annotations

from typing import Any

from fabricscope.collectors.training.volume import BoundedDetail, VolumeSettings, bucket


class Job:
    """One rank's steps, fed to a BoundedDetail as the recorder feeds it."""

    def __init__(self, rank: int = 1, world: int = 4, requests: list[list[int]] | None = None,
                 **settings: Any) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.requests = requests if requests is not None else []
        self.polls: list[int] = []
        self.vol = BoundedDetail(VolumeSettings(settle_s=0.0, **settings), lambda k, i: self.sent.append((k, i)),
                                 lambda: rank, lambda: world, self.poll)
        self.t = 1_000_000.0

    def poll(self, after: int) -> tuple[list[int], int]:
        self.polls.append(after)
        return (self.requests.pop(0), after + 1) if self.requests else ([], after)

    def step(self, n: int, dur: float = 0.1, ops: int = 4) -> None:
        t0 = self.t
        for i in range(ops):
            s = t0 + i * dur / ops
            self.vol.add({"rank": 1, "op": "all_reduce" if i % 2 == 0 else "all_gather", "seq": n * ops + i,
                          "bytes": 1000 * (i + 1), "group": "world", "group_size": 4, "step": n,
                          "start": s, "end": s + dur / ops / 2 * (1 + i)})
        self.vol.step_done(n, t0, t0 + dur, True)
        self.t += dur

    def of(self, kind: str, step: int | None = None) -> list[dict[str, Any]]:
        return [i for k, i in self.sent if k == kind and (step is None or i["step"] == step)]


def test_bucket_is_a_power_of_four_or_zero() -> None:
    assert [bucket(b) for b in (None, 0, 1, 3, 4, 15, 16, 1000, 1024, 4096)] == [0, 0, 1, 1, 4, 4, 16, 256, 1024, 4096]


def test_healthy_unsampled_steps_send_only_summaries_whose_totals_match() -> None:
    j = Job(rank=1, world=4)
    for n in range(8):
        j.step(n)
    j.vol.tick(final=True)
    detailed = {i["step"] for i in j.of("collectives")}
    # rank 1 of 4 is sampled where (1 + step) % 4 == 0: steps 3 and 7; no step is slow
    assert detailed == {3, 7}
    assert len(j.of("collectives")) == 8
    for n in range(8):
        sums = j.of("collective_summaries", n)
        # 1000 B -> 256, 2000, 3000 and 4000 B -> 1024
        assert {(s["op"], s["bucket"]) for s in sums} == {("all_reduce", 256), ("all_reduce", 1024),
                                                         ("all_gather", 1024)}
        assert sum(s["count"] for s in sums) == 4
    for n in detailed:  # the summary's totals are those of the records sent for that step
        recs, sums = j.of("collectives", n), j.of("collective_summaries", n)
        assert abs(sum(s["total_s"] for s in sums) - sum(r["end"] - r["start"] for r in recs)) < 1e-9
        assert sum(s["bytes"] for s in sums) == sum(r["bytes"] for r in recs)
        slowest = max(recs, key=lambda r: r["end"] - r["start"])
        top = max(sums, key=lambda s: s["max_s"])
        assert (top["slowest_group"], top["slowest_seq"]) == ("world", slowest["seq"])


def test_every_step_has_a_sampled_rank_and_every_rank_is_sampled() -> None:
    for world in (2, 5, 16, 40):
        sampled: dict[int, set[int]] = {}
        for rank in range(world):
            j = Job(rank=rank, world=world)
            for n in range(32):
                j.step(n, ops=1)
            j.vol.tick(final=True)
            for i in j.of("collectives"):
                sampled.setdefault(i["step"], set()).add(rank)
        assert set(sampled) == set(range(32)), world
        assert set().union(*sampled.values()) == set(range(world)), world


def test_a_slow_step_sends_its_records() -> None:
    j = Job(rank=1, world=16)
    for n in range(20):
        j.step(n, dur=0.5 if n == 12 else 0.1)
    j.vol.tick(final=True)
    assert {i["step"] for i in j.of("collectives")} == {12, 15}  # slow; sampled ((1 + 15) % 16 == 0)
    assert j.vol.stats["detail_steps_slow"] == 1


def test_a_requested_step_is_sent_late_from_the_history_and_evictions_are_counted() -> None:
    j = Job(rank=1, world=16, history=8)
    for n in range(10):
        j.step(n)
        j.vol.tick(now=j.t + 100)  # poll_s 5 against 100 s a tick: a poll every tick
    assert {i["step"] for i in j.of("collectives")} == set()
    j.requests += [[1, 9], [0]]
    j.vol.tick(now=j.t + 1000)  # 9 is in the history (steps 2-9), 1 was evicted
    assert {i["step"] for i in j.of("collectives")} == {9}
    assert j.vol.stats["detail_requests_missed"] == 1
    j.vol.tick(now=j.t + 2000)
    assert j.vol.stats["detail_requests_missed"] == 2  # step 0, long gone
    assert j.vol.stats["collectives_summarized_only"] == 2 * 4  # steps 0 and 1 left the 8-step history unsent
    assert j.polls[-2:] == [0, 1]  # each poll asks after the last request it saw
    n = len(j.polls)
    j.vol.tick(final=True)
    j.vol.tick(final=True, closing=True, now=j.t + 3000)
    assert len(j.polls) == n  # a flush, close or SIGTERM never waits for the service's answer


def test_a_record_after_its_step_was_summarized_adds_a_summary_item() -> None:
    j = Job(rank=0, world=16)  # rank 0 is sampled at step 0
    j.step(0)
    j.vol.tick(final=True)
    j.vol.add({"rank": 0, "op": "broadcast", "bytes": 8, "step": 0, "start": j.t, "end": j.t + 0.01})
    j.vol.tick(final=True)
    late = [s for s in j.of("collective_summaries", 0) if s["op"] == "broadcast"]
    assert len(late) == 1 and late[0]["count"] == 1 and late[0]["bucket"] == 4
    assert len(j.of("collectives", 0)) == 5  # the step was detailed: the late record goes too


def test_records_outside_steps_go_in_full_and_a_broken_poll_is_counted() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    def broken(_after: int) -> tuple[list[int], int]:
        raise OSError("service away")

    vol = BoundedDetail(VolumeSettings(), lambda k, i: sent.append((k, i)), lambda: 3, lambda: None, broken)
    vol.add({"rank": 3, "op": "barrier", "start": 1e9, "end": 1e9 + 1})
    vol.tick()
    assert sent == [("collectives", {"rank": 3, "op": "barrier", "start": 1e9, "end": 1e9 + 1})]
    assert vol.stats["detail_polls_failed"] == 1


def test_sampling_by_step_sends_whole_steps() -> None:
    for rank in range(3):
        j = Job(rank=rank, world=40, sample_by="step", sample=4)
        for n in range(12):
            j.step(n, ops=1)
        j.vol.tick(final=True)
        assert {i["step"] for i in j.of("collectives")} == {0, 4, 8}


def test_a_running_step_asked_for_sends_what_it_holds_and_the_rest_as_it_comes() -> None:
    j = Job(rank=1, world=16)
    for n in range(6):
        j.step(n)
    j.vol.tick(now=j.t + 100)
    rec = {"rank": 1, "op": "all_reduce", "seq": 999, "bytes": 8, "step": 6, "start": j.t, "end": j.t + 0.01}
    j.vol.add(rec)  # step 6 is running: one collective done, the rank then blocks (a hang)
    j.requests.append([6])
    j.vol.tick(now=j.t + 200)
    assert j.of("collectives", 6) == [rec] and j.of("collective_summaries", 6) == []
    j.vol.add(dict(rec, seq=1000))
    j.vol.tick(now=j.t + 300)
    assert [i["seq"] for i in j.of("collectives", 6)] == [999, 1000]


def test_at_close_the_step_the_rank_was_in_goes_in_full() -> None:
    j = Job(rank=1, world=16)
    for n in range(3):
        j.step(n)
    j.vol.add({"rank": 1, "op": "all_reduce", "seq": 7, "step": 3, "start": j.t, "end": j.t + 0.01})
    j.vol.tick(now=j.t + 100)
    j.vol.tick(final=True)  # a flush: the running step is not summarized yet
    assert j.of("collectives", 3) == [] and j.of("collective_summaries", 3) == []
    j.vol.tick(final=True, closing=True)
    assert len(j.of("collectives", 3)) == 1 and j.of("collective_summaries", 3)[0]["count"] == 1
    assert j.vol.stats["detail_steps_unfinished"] == 1
