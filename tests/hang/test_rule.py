"""The hang rule and the suspect search (service/hang/rule.py), pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fabricscope.service.hang.rule import Last, Suspect, is_hung, suspects, threshold_s


def test_threshold_is_the_factor_times_the_median_step_with_a_floor() -> None:
    assert threshold_s([1.0, 2.0, 100.0], factor=5, floor_s=3) == 10.0
    assert threshold_s([0.05] * 10, factor=5, floor_s=3) == 3.0
    assert threshold_s([], factor=5, floor_s=3) == 3.0


def test_hung_only_past_the_threshold_and_an_announced_checkpoint_holds_it_off() -> None:
    assert not is_hung(now=109.0, last_step_end=100.0, threshold=10.0, checkpoint_since=None, checkpoint_s=60)
    assert is_hung(now=111.0, last_step_end=100.0, threshold=10.0, checkpoint_since=None, checkpoint_s=60)
    assert not is_hung(now=111.0, last_step_end=100.0, threshold=10.0, checkpoint_since=101.0, checkpoint_s=60)
    # a checkpoint that never ends is a hang too, after checkpoint_s
    assert is_hung(now=170.0, last_step_end=100.0, threshold=10.0, checkpoint_since=101.0, checkpoint_s=60)
    assert not is_hung(now=1e9, last_step_end=None, threshold=10.0, checkpoint_since=None, checkpoint_s=60)


def test_the_rank_that_never_entered_is_named_with_the_collective_the_others_wait_in() -> None:
    last = [Last(r, "world", 7, "all_reduce", "entered") for r in (0, 1, 2)]
    last += [Last(r, "world", 6, "all_reduce", "finished") for r in (0, 1, 2, 3)]
    last.append(Last(3, "world", 6, "broadcast", "finished"))
    found, waiting = suspects(last)
    assert found == [Suspect(3, "world", 7, "all_reduce", "not_entered")]
    assert waiting == [0, 1, 2]


def test_a_rank_stuck_in_an_earlier_collective_did_not_finish_it() -> None:
    last = [Last(0, "tp0", 4, "all_gather", "entered"), Last(1, "tp0", 4, "all_gather", "entered"),
            Last(2, "tp0", 3, "reduce_scatter", "entered")]
    found, waiting = suspects(last)
    assert found == [Suspect(2, "tp0", 3, "reduce_scatter", "not_finished")]
    assert waiting == [0, 1]


def test_groups_with_nobody_waiting_name_nobody() -> None:
    last = [Last(r, "world", 9, "all_reduce", "finished") for r in range(4)] + [Last(0, "dp", 2, "broadcast",
                                                                                     "finished")]
    assert suspects(last) == ([], [])


records = st.lists(st.builds(Last, rank=st.integers(0, 7), group=st.sampled_from(["world", "tp0", "dp1"]),
                             seq=st.integers(0, 6), op=st.sampled_from(["all_reduce", "broadcast"]),
                             state=st.sampled_from(["finished", "entered"])), max_size=40)


@given(records)
def test_suspects_and_waiters_are_consistent(last: list[Last]) -> None:
    found, waiting = suspects(last)
    # nobody both waits and is suspected; each rank of a group at most once; nobody invented
    assert not {s.rank for s in found} & set(waiting)
    assert len({(s.rank, s.group) for s in found}) == len(found)
    seen = {(x.rank, x.group) for x in last}
    assert all((s.rank, s.group) in seen for s in found)
    assert set(waiting) <= {x.rank for x in last if x.state == "entered"}
    assert waiting == sorted(set(waiting))
    # a suspect's collective is never behind what it last did in that group
    for s in found:
        top = max(x.seq for x in last if (x.rank, x.group) == (s.rank, s.group))
        assert s.seq >= top
        if s.state == "not_finished":
            assert any(x.seq == s.seq and x.state == "entered" for x in last if (x.rank, x.group) == (s.rank, s.group))
    # with no collective in flight there is nobody to name
    if all(x.state == "finished" for x in last):
        assert found == [] and waiting == []
