"""The change detection behind /v1/trends/annotations, on hand-made series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fabricscope.service.trends.annotations import comm_jumps, version_changes

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _pts(*values: float | None) -> list[tuple[datetime, float | None]]:
    return [(T0 + timedelta(hours=i), v) for i, v in enumerate(values)]


def test_one_annotation_per_excursion_at_its_first_bucket() -> None:
    got = comm_jumps(_pts(0.20, 0.21, 0.19, 0.20, 0.30, 0.31, 0.20, 0.20, 0.33), threshold=0.25, window=24,
                     min_points=3)
    assert [g["ts"] for g in got] == [T0 + timedelta(hours=4), T0 + timedelta(hours=8)]
    assert abs(got[0]["trailing_median"] - 0.20) < 1e-12 and abs(got[0]["change"] - 0.5) < 1e-12


def test_no_jump_below_the_threshold_or_without_enough_history() -> None:
    assert comm_jumps(_pts(0.20, 0.20, 0.20, 0.249), threshold=0.25, window=24, min_points=3) == []
    assert comm_jumps(_pts(0.20, 0.20, 0.40), threshold=0.25, window=24, min_points=3) == []
    # empty buckets are skipped, not zeros: the median stays that of the buckets with data
    got = comm_jumps(_pts(0.2, None, 0.2, None, 0.2, 0.26), threshold=0.25, window=24, min_points=3)
    assert [g["ts"] for g in got] == [T0 + timedelta(hours=5)]


def test_the_window_forgets_an_old_level() -> None:
    # after a lasting rise the trailing median follows; a second rise from there is a new jump
    vals = [0.1] * 4 + [0.2] * 4 + [0.3]
    got = comm_jumps(_pts(*vals), threshold=0.25, window=3, min_points=3)
    assert [g["ts"] for g in got] == [T0 + timedelta(hours=4), T0 + timedelta(hours=8)]


def test_version_change_only_between_stated_values_of_one_group() -> None:
    def job(name: str, grp: str, h: int, **labels: str) -> dict[str, object]:
        return {"job": name, "grp": grp, "labels": labels, "started": T0 + timedelta(hours=h)}

    jobs = [job("a", "m1", 0, torch_version="2.4.0", nccl_version="2.20.5"),
            job("x", "m2", 1, torch_version="2.5.0"),
            job("b", "m1", 2, torch_version="2.4.0"),  # states no NCCL version
            job("c", "m1", 3, torch_version="2.5.1", nccl_version="2.21.5", cuda_version="12.4")]
    got = version_changes(jobs)
    # c against the last stated values of m1: torch of b, NCCL of a; x (m2) compares with nothing
    assert [(g["job"], g["previous_job"], g["changes"]) for g in got] == [
        ("c", "b", {"torch_version": ["2.4.0", "2.5.1"], "nccl_version": ["2.20.5", "2.21.5"]})]
    assert got[0]["text"] == "torch 2.4.0 → 2.5.1, nccl 2.20.5 → 2.21.5"
    assert version_changes(jobs[:3]) == []
