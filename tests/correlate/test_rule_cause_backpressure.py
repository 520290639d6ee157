"""Queue, PFC-direction and InfiniBand evidence on the pure functions (#16): the congested queue is
named, not the loudest victim; a NIC's pause storm stays the NIC's; credit waits follow the chain."""

from __future__ import annotations

import json

import pandas as pd

from fabricscope.service.correlate.causes import net_cause
from fabricscope.service.correlate.direction import follow_backpressure
from fabricscope.service.correlate.localize import (
    Topo,
    build_topo,
    candidates,
    finish_scores,
    rank_candidates,
    series_groups,
)
from fabricscope.service.correlate.rules import ids

Q3 = json.dumps({"queue": "3"})
P3 = json.dumps({"priority": "3"})


def _topo() -> Topo:
    """Two leaves, two spines; three hosts on leaf1, one on leaf2."""
    ranks = pd.DataFrame({"host": ["node01", "node02", "node03", "node04"], "nic": ["mlx5_0"] * 4})
    links = pd.DataFrame({"a": ["node01:mlx5_0", "node02:mlx5_0", "node03:mlx5_0", "node04:mlx5_0",
                                "leaf1:swp9", "leaf1:swp10", "leaf2:swp9", "leaf2:swp10"],
                          "b": ["leaf1:swp1", "leaf1:swp2", "leaf1:swp3", "leaf2:swp1",
                                "spine1:swp1", "spine2:swp1", "spine1:swp2", "spine2:swp2"]})
    return build_topo(ranks, links, [])


def _scored(rows: list[tuple[str, str, float, str | None]], topo: Topo) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["source", "metric", "score", "labels"])
    df["role"] = df["source"].map(topo.role)
    df["cur"] = df["score"] * 10.0
    df["baseline"] = 1.0
    return df


def _top(ev: pd.DataFrame) -> tuple[str, str]:
    top = rank_candidates(ev, ("nic", "link", "fabric")).iloc[0]
    return top["layer"], top["component"]


def _rule(ev: pd.DataFrame) -> str:
    """The cause rule that names the network cause of `ev` (causes.net_cause)."""
    return str(net_cause(ev, 1.0)["rule"])


def _incast(topo: Topo) -> pd.DataFrame:
    """leaf1:swp1's queue 3 fills (incast toward node01): leaf1 pauses its uplinks and swp2; the spine
    ports and node02 receive far more pause than the culprit shows of anything, and spine1:swp1's own
    queue, paused, grows too."""
    return _scored([
        ("leaf1:swp1", "queue_occupancy_bytes", 40.0, Q3),
        ("leaf1:swp1", "queue_watermark_bytes", 35.0, Q3),
        ("leaf1:swp1", "ecn_marked_packets_total", 30.0, Q3),
        ("leaf1:swp9", "tx_pause_frames_total", 200.0, P3),
        ("leaf1:swp10", "tx_pause_frames_total", 180.0, P3),
        ("leaf1:swp2", "tx_pause_frames_total", 150.0, P3),
        ("spine1:swp1", "rx_pause_frames_total", 600.0, P3),
        ("spine2:swp1", "rx_pause_frames_total", 500.0, P3),
        ("spine1:swp1", "queue_occupancy_bytes", 300.0, Q3),
        ("spine1:swp1", "pfc_deadlock_total", 50.0, Q3),
        ("node02:mlx5_0", "rx_pause_frames_total", 400.0, P3),
    ], topo)


def test_the_congested_queue_is_named_over_louder_victims() -> None:
    topo = _topo()
    ev = candidates(_incast(topo), topo)
    assert _top(ev) != ("fabric", "leaf1:swp1")  # without direction a victim wins: the test can fail
    ev = follow_backpressure(ev, topo)
    assert _top(ev) == ("fabric", "leaf1:swp1")
    cause = net_cause(ev, 1.0)
    assert (cause["layer"], cause["component"]) == ("fabric", "leaf1:swp1")
    assert cause["rule"] == ids.CAUSE_BACKPRESSURE  # named by following the pause, not by its own signal
    first = cause["evidence"][0]  # the queue itself leads the evidence, with its label
    assert first["source"] == "leaf1:swp1" and first["labels"] == {"queue": "3"}
    assert first["metric"] == "queue_occupancy_bytes"
    assert {e["source"] for e in cause["evidence"]} >= {"leaf1:swp1", "spine1:swp1"}


def test_pause_that_spread_a_hop_further_still_leads_to_the_culprit() -> None:
    topo = _topo()
    rows = _incast(topo).values.tolist()
    # the paused spine1 pauses leaf2's uplink in turn; leaf2 receives it and its uplink's queue fills
    more = _scored([("spine1:swp2", "tx_pause_frames_total", 300.0, P3),
                    ("leaf2:swp9", "rx_pause_frames_total", 700.0, P3),
                    ("leaf2:swp9", "queue_occupancy_bytes", 250.0, Q3)], topo)
    df = pd.concat([pd.DataFrame(rows, columns=more.columns), more], ignore_index=True)
    ev = follow_backpressure(candidates(df, topo), topo)
    assert _top(ev) == ("fabric", "leaf1:swp1")
    assert set(ev.loc[ev["metric"].str.contains("pause"), "component"]) == {"leaf1:swp1"}
    assert _rule(ev) == ids.CAUSE_BACKPRESSURE


def test_a_nic_pause_storm_stays_the_nics() -> None:
    """node03 has no buffer and storms pause: its leaf port's queue stops and fills, the watchdog fires."""
    topo = _topo()
    df = _scored([("node03:mlx5_0", "tx_pause_frames_total", 80.0, P3),
                  ("leaf1:swp3", "rx_pause_frames_total", 300.0, P3),
                  ("leaf1:swp3", "queue_occupancy_bytes", 200.0, Q3),
                  ("leaf1:swp3", "pfc_deadlock_total", 40.0, Q3),
                  ("leaf1:swp9", "tx_pause_frames_total", 20.0, P3)], topo)
    ev = follow_backpressure(candidates(df, topo), topo)
    assert _top(ev) == ("nic", "node03:mlx5_0") and _rule(ev) == ids.CAUSE_BACKPRESSURE
    assert set(ev.loc[ev["source"] == "leaf1:swp3", "layer"]) == {"nic"}


def test_a_port_sending_pause_without_queue_telemetry_is_still_the_origin() -> None:
    topo = _topo()
    df = _scored([("spine1:swp2", "tx_pause_frames_total", 90.0, P3),
                  ("spine1:swp2", "ecn_marked_packets_total", 20.0, None),
                  ("leaf2:swp9", "rx_pause_frames_total", 300.0, P3)], topo)
    assert _top(follow_backpressure(candidates(df, topo), topo)) == ("fabric", "spine1:swp2")
    df = _scored([("leaf1:swp9", "tx_pause_frames_total", 90.0, P3)], topo)
    assert _top(follow_backpressure(candidates(df, topo), topo)) == ("fabric", "leaf1:swp9")


def test_lossy_queue_drops_name_the_port() -> None:
    topo = _topo()
    df = _scored([("leaf2:swp1", "queue_dropped_packets_total", 60.0, json.dumps({"queue": "0"})),
                  ("leaf2:swp1", "queue_watermark_bytes", 20.0, json.dumps({"queue": "0"}))], topo)
    cause = net_cause(follow_backpressure(candidates(df, topo), topo), 1.0)
    assert (cause["layer"], cause["component"]) == ("fabric", "leaf2:swp1")
    assert cause["rule"] == ids.CAUSE_NETWORK_SIGNAL  # its own drops: nothing followed
    assert cause["evidence"][0]["labels"] == {"queue": "0"}
    units = {e["metric"]: e["unit"] for e in cause["evidence"]}
    assert units == {"queue_dropped_packets_total": "per_second", "queue_watermark_bytes": "value"}


def test_infiniband_credit_waits_lead_to_the_port_that_cannot_drain() -> None:
    topo = _topo()
    # leaf1:swp1 (toward node01) is the bottleneck; the spine ports feeding leaf1 wait longer in
    # total, and so do node02's and node03's HCAs
    df = _scored([("leaf1:swp1", "port_xmit_wait_total", 60.0, None),
                  ("spine1:swp1", "port_xmit_wait_total", 400.0, None),
                  ("spine2:swp1", "port_xmit_wait_total", 300.0, None),
                  ("node02:mlx5_0", "port_xmit_wait_total", 200.0, None),
                  ("node03:mlx5_0", "port_xmit_wait_total", 200.0, None)], topo)
    ev = candidates(df, topo)
    assert _top(ev) != ("fabric", "leaf1:swp1")
    assert _top(follow_backpressure(ev, topo)) == ("fabric", "leaf1:swp1")
    assert _rule(follow_backpressure(ev, topo)) == ids.CAUSE_BACKPRESSURE
    # a spine port toward leaf2 congested: leaf1's uplink into that spine waits on it
    df = _scored([("spine1:swp2", "port_xmit_wait_total", 50.0, None),
                  ("leaf1:swp9", "port_xmit_wait_total", 500.0, None),
                  ("node01:mlx5_0", "port_xmit_wait_total", 100.0, None)], topo)
    assert _top(follow_backpressure(candidates(df, topo), topo)) == ("fabric", "spine1:swp2")


def test_link_error_recovery_names_the_link() -> None:
    topo = _topo()
    df = _scored([("node02:mlx5_0", "link_error_recovery_total", 30.0, None),
                  ("node02:mlx5_0", "symbol_errors_total", 20.0, None)], topo)
    ev = follow_backpressure(candidates(df, topo), topo)
    assert _top(ev) == ("link", "leaf1:swp2") and _rule(ev) == ids.CAUSE_NETWORK_SIGNAL
    df = _scored([("spine2:swp2", "link_error_recovery_total", 30.0, None)], topo)
    assert _top(candidates(df, topo)) == ("link", "leaf2:swp10")


def test_each_queue_is_its_own_peer_group() -> None:
    topo = _topo()
    meta = pd.DataFrame([
        (1, "leaf1:swp1", "queue_occupancy_bytes", "gauge", Q3),
        (2, "leaf1:swp2", "queue_occupancy_bytes", "gauge", Q3),
        (3, "leaf1:swp1", "queue_occupancy_bytes", "gauge", json.dumps({"queue": "0"})),
        (4, "leaf1:swp1", "queue_watermark_bytes", "gauge", Q3),
        (5, "leaf1:swp1", "queue_dropped_packets_total", "counter", Q3),
        (6, "spine1:swp1", "pfc_deadlock_total", "counter", Q3),
        (7, "node01:mlx5_0", "link_error_recovery_total", "counter", "{}"),
        (8, "leaf1:swp1", "tx_queue_bytes_total", "counter", Q3),  # volume, not an anomaly signal
    ], columns=["series_id", "source", "metric", "kind", "labels"])
    g = series_groups(meta, topo).set_index("series_id")
    assert g.loc[1, "grp"] == g.loc[2, "grp"] != g.loc[3, "grp"]
    assert {4, 5, 6, 7} <= set(g.index) and 8 not in g.index
    assert g.loc[4, "gauge"] and not g.loc[5, "gauge"]


def test_a_link_down_only_before_the_window_yields_to_a_fault_present_in_it() -> None:
    """Congestion on spine1:swp2 now; its link flapped 8 s ago (the link-down counter reaches the window
    only through the aftermath lookback). The present fault is named; the past flap alone still would be."""
    topo = _topo()
    out = pd.DataFrame([(1, 1.0, 0.0, 0.0, 50.0, 0.0), (2, 1.0, 0.0, 0.0, 50.0, float("nan")),
                        (3, 2e6, 1e4, 1e3, 20.0, 2e6)],
                       columns=["series_id", "cur", "peer_med", "peer_mad", "peer_z", "cur_w"])
    meta = pd.DataFrame([(1, "leaf2:swp9", "link_down_total", None, "leaf_up", 0.02),
                         (2, "spine1:swp2", "link_down_total", None, "spine", 0.02),
                         (3, "spine1:swp2", "port_xmit_wait_total", None, "spine", 1e5)],
                        columns=["series_id", "source", "metric", "labels", "role", "floor"])
    hist = pd.DataFrame(columns=["series_id", "hist_med", "hist_sigma"]).astype(float)
    scored = finish_scores(out, meta, hist)
    assert scored.set_index("series_id")["aftermath"].to_dict() == {1: True, 2: True, 3: False}
    ev = follow_backpressure(candidates(scored, topo), topo)
    assert _top(ev) == ("fabric", "spine1:swp2")
    flap_only = follow_backpressure(candidates(scored[scored["series_id"] != 3], topo), topo)
    assert _top(flap_only) == ("link", "leaf2:swp9")
    undiscounted = candidates(scored.drop(columns="aftermath"), topo)
    assert _top(undiscounted) == ("link", "leaf2:swp9")  # before: the past flap outweighed the congestion
