"""A peer group of two (#15, cluster shapes): a spine with two leaves has two leaf-facing ports, and the
MAD of a pair is half their gap, each one's own deviation. Scored so, the port whose link took
symbol errors at 1,929/s beside its quiet twin stood 0.67 MADs out, never an outlier (stop 39: a
16-step uplink fault on a 2-leaf, 1-spine cluster answered `unknown` throughout). The floor alone
says whether a pair's gap matters; groups of three and more keep their MAD."""

from __future__ import annotations

import numpy as np

from fabricscope.service.correlate import window as win


def _scores(groups: list[int], values: list[float], floor: float = 20.0) -> dict[int, float]:
    n = len(values)
    sc = win.Scoring(ids=np.arange(n, dtype=np.int64), grp=np.array(groups, np.int64), gauge=np.zeros(n, bool),
                     floor=np.full(n, floor), net=np.ones(n, bool), solo=np.zeros(n, bool), lit={})
    cur = np.array(values, float)
    out, _ = win.peer_scores(sc, np.arange(n), cur, cur, min_z=3.0, limit=n)
    return dict(zip(out["series_id"].tolist(), out["peer_z"].tolist(), strict=True))


def test_one_of_a_pair_far_over_its_twin_stands_out_by_the_floor() -> None:
    got = _scores([0, 0], [1929.0, 0.0])
    assert list(got) == [0] and got[0] == (1929.0 - 964.5) / 20.0


def test_a_pair_within_six_floors_of_each_other_is_not_an_outlier() -> None:
    # both ports' common background moves together; a gap under 2 * 3 floors is noise
    assert _scores([0, 0], [130.0, 20.0]) == {}
    assert _scores([0, 0], [10_000.0, 9_900.0]) == {}


def test_a_group_of_three_keeps_its_mad() -> None:
    # three ports with one wobbling: the MAD of the other two's spread measures the noise
    assert _scores([0, 0, 0], [400.0, 0.0, 300.0]) == {}
    assert list(_scores([0, 0, 0], [1929.0, 0.0, 10.0])) == [0]
    # a pair in one group and a triple in another are scored each by its own rule
    assert list(_scores([0, 0, 1, 1, 1], [1929.0, 0.0, 400.0, 0.0, 300.0])) == [0]
