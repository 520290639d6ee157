"""Series without peers (#15): which series are solo, and how their own history scores them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fabricscope.service.correlate.causes import work_cause
from fabricscope.service.correlate.localize import build_topo, candidates, finish_scores, series_groups

RANKS = pd.DataFrame({"host": ["h1", "h2"], "gpu": ["g0", "g0"], "nic": ["n0", "n0"]})
NO_LINKS = pd.DataFrame({"a": [], "b": []})
# two hosts' local mount (peers of each other), two storage systems that both serve a volume "v0"
VOLUMES = ["h1:/q/zz", "h2:/q/zz", "st9x:v0", "kk2:v0"]


def _meta() -> pd.DataFrame:
    topo = build_topo(RANKS, NO_LINKS, VOLUMES)
    meta = pd.DataFrame({"series_id": [1, 2, 3, 4], "source": VOLUMES, "metric": ["read_latency_seconds"] * 4,
                         "kind": ["gauge"] * 4, "labels": ["{}"] * 4})
    return series_groups(meta, topo)


def test_a_storage_systems_volume_has_no_peers_whatever_its_name() -> None:
    meta = _meta()
    assert dict(zip(meta["source"], meta["solo"], strict=True)) == {
        "h1:/q/zz": False, "h2:/q/zz": False, "st9x:v0": True, "kk2:v0": True}
    assert meta.loc[2, "grp"] != meta.loc[3, "grp"]  # the same volume name on two systems: not peers


def _solo_rows(cur: list[float], hist_med: list[float], hist_sigma: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two storage systems' volumes (series 3, 4) as the database returns solo series: the window
    value with no peer score (peer_z NULL), and their own history's median and sigma."""
    out = pd.DataFrame({"series_id": [3, 4], "cur": cur, "peer_med": cur, "peer_mad": [0.0, 0.0],
                        "peer_z": [np.nan, np.nan], "cur_w": cur})
    return out, pd.DataFrame({"series_id": [3, 4], "hist_med": hist_med, "hist_sigma": hist_sigma})


def test_a_solo_series_is_scored_on_its_own_history_with_a_floor_relative_to_its_level() -> None:
    meta = _meta()
    out, hist = _solo_rows([0.006, 0.0013], [0.0015, 0.0012], [0.00015, 0.00012])
    scored = finish_scores(out, meta, hist).set_index("source")
    # +0.0045 over a level of 0.0015: the floor is 15 % of the level (0.000225), not FLOORS' 0.002
    assert math.isclose(scored.loc["st9x:v0", "score"], 0.0045 / 0.000225)
    assert scored.loc["st9x:v0", "baseline"] == 0.0015
    assert scored.loc["kk2:v0", "score"] < 3  # its usual wobble is no anomaly
    # without any history a solo series cannot be judged: never a candidate
    none = finish_scores(out, meta, hist.iloc[:0])
    assert none["score"].isna().all() and candidates(none, build_topo(RANKS, NO_LINKS, VOLUMES)).empty


def test_a_fast_shared_volume_is_judged_against_its_own_level_not_a_local_disks() -> None:
    # a sub-millisecond volume (0.7 ms) sampled every 8 s: a fault in ~1 s of the sample shows as
    # +70 %; FLOORS' 2 ms (a host's local disk) at the old 10 % share put it at 2.5 floors, under
    # MIN_SCORE; its own 15 % is 0.1 ms, and the absolute floor no higher than that
    out, hist = _solo_rows([0.00122, 0.00084], [0.00072, 0.00072], [0.00003, 0.00003])
    scored = finish_scores(out, _meta(), hist).set_index("source")
    assert scored.loc["st9x:v0", "score"] >= 3
    assert scored.loc["kk2:v0", "score"] < 3  # +17 %: within what a volume's latency wobbles


def test_no_straggler_and_a_slow_shared_volume_name_the_volume_with_rising_confidence() -> None:
    meta = _meta()
    topo = build_topo(RANKS, NO_LINKS, VOLUMES)
    out = pd.DataFrame({"series_id": [3], "cur": [0.006], "peer_med": [0.006], "peer_mad": [0.0],
                        "peer_z": [np.nan], "cur_w": [0.006]})
    weak = pd.DataFrame({"series_id": [3], "hist_med": [0.0015], "hist_sigma": [0.0011]})
    strong = pd.DataFrame({"series_id": [3], "hist_med": [0.0015], "hist_sigma": [0.0001]})
    causes = [work_cause(None, candidates(finish_scores(out, meta, h), topo), topo, 1.0) for h in (weak, strong)]
    assert [(c["layer"], c["component"]) for c in causes] == [("storage", "st9x:v0")] * 2
    assert causes[0]["evidence"][0]["metric"] == "read_latency_seconds"
    assert 0.5 < causes[0]["confidence"] < causes[1]["confidence"] <= 0.85
