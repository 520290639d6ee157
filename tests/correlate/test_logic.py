"""Pure parts of the engine on arrays and DataFrames: baseline, decomposition, localization."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fabricscope.service.correlate.baseline import CHANGE_RUN, Baselines, compute_baselines
from fabricscope.service.correlate.causes import combine_causes, first_timed, gpu_state_first, rank_causes
from fabricscope.service.correlate.decompose import decompose, find_straggler
from fabricscope.service.correlate.localize import build_topo, candidates, rank_candidates


def _baseline(d: np.ndarray) -> Baselines:
    n = len(d)
    return compute_baselines(d, np.full(n, 0.3), np.zeros(n, bool), np.zeros(n))


def test_slow_steps_detected_and_excluded_from_baseline() -> None:
    rng = np.random.default_rng(0)
    d = 2.0 + rng.normal(0, 0.004, 100)
    d[0] = 6.0  # compilation step: no history, not judged
    d[40:46] = 2.3  # a 15% regression
    b = _baseline(d)
    assert not b.slow[0]
    assert b.slow[40:46].all()
    assert not b.slow[1:40].any() and not b.slow[46:].any()
    assert abs(b.base[45] - 2.0) < 0.01  # slow steps did not pull the baseline up


def test_level_change_is_relearned() -> None:
    rng = np.random.default_rng(1)
    d = 2.0 + rng.normal(0, 0.004, 120)
    d[50:] += 0.3  # new training phase, permanently slower
    b = _baseline(d)
    assert b.slow[50]  # first reported
    assert not b.slow[50 + CHANGE_RUN + 1:].any()  # then accepted as the new normal
    assert abs(b.base[-1] - 2.3) < 0.02


def _ranks(skew: np.ndarray | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    n, k = 16, 4
    hosts = [f"node{r // 4 + 1:02d}" for r in range(n)]
    compute = np.full(n, 1.6)
    compute[6] = 2.0  # rank 6 is slow
    # every collective ends when the slowest rank arrived: the slow rank waits least
    wait = (compute.max() - compute) / k
    coll = pd.DataFrame([(r, s, 0.08 + wait[r]) for r in range(n) for s in range(k)],
                        columns=["rank", "seq", "duration_s"])
    dur = compute + 0.05 + 0.09 + coll.groupby("rank")["duration_s"].sum().to_numpy()
    steps = pd.DataFrame({"rank": range(n), "dur": dur, "data": 0.05, "fb": compute, "opt": 0.09, "ckpt": 0.0,
                          "host": hosts, "gpu": [f"gpu{r % 4}" for r in range(n)]})
    return steps, coll


def test_straggler_found_from_durations() -> None:
    steps, coll = _ranks()
    st = find_straggler(decompose(steps, coll))
    assert st is not None and st.rank == 6 and st.phase == "compute" and not st.host_level
    assert (st.host, st.gpu) == ("node02", "gpu2")
    assert abs(st.excess_s - 0.4) < 0.01


def test_missing_collective_rows_do_not_make_a_straggler() -> None:
    steps, coll = _ranks()
    coll = coll.drop(coll[(coll["rank"] == 3) & (coll["seq"] == 1)].index)  # a lost row
    st = find_straggler(decompose(steps, coll))
    assert st is not None and st.rank == 6


def test_uniform_work_is_no_straggler() -> None:
    steps, coll = _ranks()
    steps["fb"] = 1.6
    steps["dur"] = 1.6 + 0.14 + 0.32
    coll["duration_s"] = 0.08
    assert find_straggler(decompose(steps, coll)) is None


def test_localization_prefers_origin_over_symptom() -> None:
    ranks = pd.DataFrame({"host": ["node01", "node02"], "nic": ["mlx5_0", "mlx5_0"]})
    links = pd.DataFrame({"a": ["node01:mlx5_0", "node02:mlx5_0", "leaf1:Ethernet9"],
                          "b": ["leaf1:Ethernet1", "leaf1:Ethernet2", "spine1:Ethernet1"]})
    topo = build_topo(ranks, links, [])
    assert topo.role["leaf1:Ethernet9"] == "leaf_up" and topo.role["spine1:Ethernet1"] == "spine"
    assert topo.link_name("node01:mlx5_0") == "leaf1:Ethernet1"
    scored = pd.DataFrame([
        # a NIC sending pause because it has no buffer: origin on the NIC, symptom on its switch port
        ("node01:mlx5_0", "nic", "tx_pause_frames_total", 400.0),
        ("node01:mlx5_0", "nic", "rx_out_of_buffer_total", 300.0),
        ("leaf1:Ethernet1", "leaf_down", "rx_pause_frames_total", 400.0),
        ("leaf1:Ethernet9", "leaf_up", "tx_pause_frames_total", 4.0),
    ], columns=["source", "role", "metric", "score"])
    ev = candidates(scored, topo)
    top = rank_candidates(ev, ("nic", "link", "fabric")).iloc[0]
    assert (top["layer"], top["component"]) == ("nic", "node01:mlx5_0")
    # errors on the NIC side of a link name the link by its switch port
    ev = candidates(pd.DataFrame([("node02:mlx5_0", "nic", "symbol_errors_total", 50.0)],
                                 columns=["source", "role", "metric", "score"]), topo)
    assert (ev.iloc[0]["layer"], ev.iloc[0]["component"]) == ("link", "leaf1:Ethernet2")


def test_a_named_cause_heads_the_answer_over_an_unknown_one() -> None:
    link = {"layer": "link", "component": "leaf1:swp2", "lost_s": 0.1, "evidence": [{"metric": "x"}]}
    unknown = {"layer": "unknown", "component": None, "lost_s": 0.3, "evidence": []}
    gpu = {"layer": "compute", "component": "h1:0", "lost_s": 0.2, "evidence": [{"metric": "y"}]}
    assert rank_causes([unknown, link]) == [link, unknown]
    assert rank_causes([link, unknown, gpu]) == [gpu, link, unknown]  # named ones still by lost time
    assert rank_causes([unknown]) == [unknown]


def test_a_gpu_its_own_device_shows_heads_a_network_cause_less_sure_than_it() -> None:
    """747 run 5 step 48: a PCIe downtrain (its GPU 104 sigmas over its compute baseline, link trained
    from gen 4 to 2) behind a link named at 0.39 from a flap 8 s before the step, which the collectives'
    larger share of the loss had put first. The GPU slows the ring it sits in: it heads the answer.
    Rule: a GPU whose own state alone slows it heads a network cause less sure than it; an XID, an error counter
    or a clock sample does not (causes.gpu_state_first)."""
    link = {"layer": "link", "component": "sw10:p15", "lost_s": 0.56, "confidence": 0.39,
            "evidence": [{"source": "sw10:p15", "metric": "link_down_total", "score": 16.7}]}
    timing = {"source": "n3:gpu4", "metric": "compute_seconds", "score": 104.1, "kind": "timing"}
    pcie = {"source": "n3:gpu4", "metric": "pcie_link_generation", "score": 50.0}
    gpu = {"layer": "compute", "component": "n3:gpu4", "lost_s": 0.47, "confidence": 0.81, "evidence": [timing, pcie]}
    assert gpu_state_first([link, gpu]) == [gpu, link]
    # its timing alone is not its device's state; a surer network cause keeps its place
    alone = {**gpu, "evidence": [timing]}
    assert gpu_state_first([link, alone]) == [link, alone]
    sure = {**link, "confidence": 0.9}
    assert gpu_state_first([sure, gpu]) == [sure, gpu]
    # a device row of another source (a NIC of the host) is not the GPU's own
    other = {**gpu, "evidence": [timing, {**pcie, "source": "n3:nic1"}]}
    assert gpu_state_first([link, other]) == [link, other]
    # nor is an XID logged before the step, nor an error counter's rate (749 run 27 step 42: a
    # straggler whose XID came 30 s before, 0.757 against a link at 0.755 that lost twice its time)
    xid = {"source": "n3:gpu4", "metric": "gpu_xid", "score": 10.0, "unit": "events", "kind": "event"}
    replays = {"source": "n3:gpu4", "metric": "pcie_replays_total", "score": 5.0, "unit": "per_second"}
    for rows in ([timing, xid], [timing, replays]):
        logged = {**gpu, "evidence": rows}
        assert gpu_state_first([link, logged]) == [link, logged]
    assert gpu_state_first([link, {**gpu, "evidence": [timing, {**pcie, "unit": "value"}]}])[0] is not link
    # nor is a clock read under its peers' without a throttle flag (829 run 12 step 45: one low sample
    # of a straggler's clock over congestion that lost twice its time); with the flag it heads
    clock = {"source": "n3:gpu4", "metric": "gpu_sm_clock_hz", "score": 10.5, "unit": "value"}
    assert gpu_state_first([link, {**gpu, "evidence": [timing, clock]}])[0] is link
    flag = {"source": "n3:gpu4", "metric": "gpu_throttle_active", "score": 10.0, "unit": "value"}
    assert gpu_state_first([link, {**gpu, "evidence": [timing, clock, flag]}])[0] is not link


def _c(layer: str, comp: str | None) -> dict:
    return {"layer": layer, "component": comp, "confidence": 0.8, "evidence": [] if layer == "unknown" else [{}]}


def _two_causes() -> dict:  # type: ignore[type-arg]
    port = {"layer": "fabric", "component": "sw3:p0", "lost_s": 0.085, "confidence": 0.53}
    gpu = {"layer": "compute", "component": "h5:g1", "lost_s": 0.082, "confidence": 0.74}
    port_row = {"source": "sw3:p0", "metric": "port_xmit_wait_total", "value": 4e5, "baseline": 1e4, "score": 8.6}
    return {"step": 32, "slow": True, "layer": "fabric", "component": "sw3:p0", "confidence": 0.53,
            "evidence": [port_row], "causes": [port, gpu]}


def test_a_cause_its_phase_does_not_show_yields_to_the_next_one_that_it_does() -> None:
    """Rule: a cause whose phase did not show it yields to the next named cause that does (causes.first_timed)."""
    # 759 run 12 step 32: the onset of a GPU straggler, second to a port whose congestion the step's
    # collectives did not show; made healthy with the port, it is slow with the GPU
    untimed = {"source": "", "metric": "collective_transfer_seconds", "value": 0.3, "baseline": 0.3, "score": 0.2,
               "unit": "seconds", "kind": "untimed"}
    out = _two_causes()
    assert first_timed(out, lambda o: untimed if o["layer"] == "fabric" else None) is None
    assert (out["layer"], out["component"], out["confidence"]) == ("compute", "h5:g1", 0.74)
    assert [c["component"] for c in out["causes"]] == ["h5:g1"]
    assert out["evidence"][-1] == untimed  # why the port was dropped
    # neither shows: the last one's row, and the step is the caller's to make healthy
    out = _two_causes()
    assert first_timed(out, lambda o: {**untimed, "metric": o["layer"]}) == {**untimed, "metric": "compute"}
    # the first shows: nothing changes
    out = _two_causes()
    assert first_timed(out, lambda o: None) is None and out == _two_causes()


def test_unexplained_work_goes_to_an_anomalous_network() -> None:
    # 60 % of the lost time is local work with no straggler; the network shows a bad link
    out = combine_causes(1.0, 0.6, 0.4, lambda: _c("unknown", None), lambda: _c("link", "leaf1:swp2"))
    assert [(c["layer"], c["component"], round(c["lost_s"], 6)) for c in out] == [("link", "leaf1:swp2", 1.0)]
    # ... even when the network share alone is under the listing threshold
    out = combine_causes(1.0, 0.95, 0.05, lambda: _c("unknown", None), lambda: _c("link", "leaf1:swp2"))
    assert [(c["layer"], round(c["lost_s"], 6)) for c in out] == [("link", 1.0)]


def test_a_named_work_cause_or_a_quiet_network_keeps_the_split() -> None:
    out = combine_causes(1.0, 0.6, 0.4, lambda: _c("compute", "h1:0"), lambda: _c("link", "leaf1:swp2"))
    assert [(c["layer"], round(c["lost_s"], 6)) for c in out] == [("compute", 0.6), ("link", 0.4)]
    out = combine_causes(1.0, 0.6, 0.4, lambda: _c("unknown", None), lambda: _c("unknown", None))
    assert [(c["layer"], round(c["lost_s"], 6)) for c in out] == [("unknown", 0.6), ("unknown", 0.4)]
    out = combine_causes(1.0, 0.9, 0.1, lambda: _c("storage", "h1:/ckpt"), lambda: _c("link", "leaf1:swp2"))
    assert [(c["layer"], round(c["lost_s"], 6)) for c in out] == [("storage", 0.9)]


def test_the_checkpoint_volume_is_the_one_the_job_wrote_to_whatever_its_name() -> None:
    from fabricscope.service.correlate.causes import work_cause
    from fabricscope.service.correlate.decompose import Straggler

    ranks = pd.DataFrame({"host": ["node01", "node02"], "nic": ["mlx5_0", "mlx5_0"]})
    volumes = ["node01:/mnt/ckpt-old", "node01:/lustre/scratch", "node01:/mnt/weka", "node02:/mnt/weka"]
    st = Straggler("checkpoint", True, 0, "node01", None, 4.0, 1.0, 3.0, 40.0, [0])
    no_ev = pd.DataFrame()
    # the hook's checkpoint events say where the job writes: a neutral name, not the one saying "ckpt"
    topo = build_topo(ranks, pd.DataFrame({"a": [], "b": []}), volumes,
                      frozenset({"node01:/lustre/scratch", "node02:/lustre/scratch", "elsewhere:/x"}))
    # volumes of the job's hosts, reported or not (node02's has no telemetry; elsewhere is no job host)
    assert topo.checkpoint_volumes == {"node01:/lustre/scratch", "node02:/lustre/scratch"}
    assert topo.role["node02:/lustre/scratch"] == "volume" and "elsewhere:/x" not in topo.role
    cause = work_cause(st, no_ev, topo, 1.0)
    assert (cause["layer"], cause["component"]) == ("storage", "node01:/lustre/scratch")
    # without events and with several volumes, no volume is guessed (least of all by its name)
    cause = work_cause(st, no_ev, build_topo(ranks, pd.DataFrame({"a": [], "b": []}), volumes), 1.0)
    assert (cause["layer"], cause["component"]) == ("storage", "node01")


def _checkpoint_step(slow_host: int | None, extra: float, seed: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """8 hosts x 4 ranks at a checkpoint step: each host's write takes 0.8 s with a 4 % spread across
    hosts (ranks of a host alike), each rank's compute 1.6 s with 2 % of its own; `slow_host` writes
    `extra` longer. Everyone waits in the collective after it for the rank with the most work."""
    rng = np.random.default_rng(seed)
    hosts = np.repeat([f"h{i}" for i in range(8)], 4)
    ck = np.repeat(0.8 * (1 + rng.normal(0, 0.04, 8)), 4) + rng.normal(0, 0.002, 32)
    if slow_host is not None:
        ck[hosts == f"h{slow_host}"] += extra
    fb = 1.6 * (1 + rng.normal(0, 0.02, 32))
    wait = (fb + ck).max() - (fb + ck)
    coll = pd.DataFrame([(r, 0, 0.05 + wait[r]) for r in range(32)], columns=["rank", "seq", "duration_s"])
    dur = fb + ck + 0.05 + 0.05 + wait
    steps = pd.DataFrame({"rank": range(32), "dur": dur, "data": 0.05, "fb": fb, "opt": 0.0, "ckpt": ck,
                          "host": hosts, "gpu": [f"gpu{r % 4}" for r in range(32)]})
    return steps, coll


def test_a_host_that_wrote_its_checkpoint_slowly_is_a_checkpoint_straggler() -> None:
    from fabricscope.service.correlate.decompose import checkpoint_straggler

    steps, coll = _checkpoint_step(3, 0.16)  # +20 %: about 4 sigmas of the write's spread, under MIN_Z
    per_rank = decompose(steps, coll)
    assert find_straggler(per_rank) is None
    everyone = {f"h{i}" for i in range(8)}
    st = checkpoint_straggler(per_rank, everyone)
    assert st is not None and (st.host, st.phase, st.host_level) == ("h3", "checkpoint", True)
    assert len(st.members) == 4 and abs(st.excess_s - 0.16) < 0.06
    # only a host whose volume the job checkpoints to, and not the healthy spread of the writes
    assert checkpoint_straggler(per_rank, everyone - {"h3"}) is None
    assert checkpoint_straggler(decompose(*_checkpoint_step(None, 0.0)), everyone) is None


def _loader_at_checkpoint(slow_host: int | None, extra: float, seed: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """8 hosts x 4 ranks at a checkpoint step: `slow_host`'s loaders read `extra` longer, everyone waits
    for them in the all-reduce, then each host writes its 0.8-s checkpoint shard (4 % spread across
    hosts) and everyone waits for the slowest writer in the barrier after it."""
    rng = np.random.default_rng(seed)
    hosts = np.repeat([f"h{i}" for i in range(8)], 4)
    data = 0.05 + rng.normal(0, 0.001, 32)
    if slow_host is not None:
        data[hosts == f"h{slow_host}"] += extra
    fb = 1.6 + rng.normal(0, 0.002, 32)
    ck = np.repeat(0.8 * (1 + rng.normal(0, 0.04, 8)), 4) + rng.normal(0, 0.002, 32)
    reduce_wait = (data + fb).max() - (data + fb)
    barrier_wait = ck.max() - ck
    coll = pd.DataFrame([(r, 0, 0.05 + reduce_wait[r]) for r in range(32)]
                        + [(r, 1, 0.002 + barrier_wait[r]) for r in range(32)], columns=["rank", "seq", "duration_s"])
    dur = data + fb + 0.05 + reduce_wait + ck + 0.002 + barrier_wait
    steps = pd.DataFrame({"rank": range(32), "dur": dur, "data": data, "fb": fb, "opt": 0.0, "ckpt": ck,
                          "host": hosts, "gpu": [f"gpu{r % 4}" for r in range(32)]})
    return steps, coll


def test_a_slow_loader_at_a_checkpoint_step_is_found_under_the_writes_spread() -> None:
    # +0.12 s of reads: ~4 sigmas of the writes' spread in the ranks' local work, under MIN_Z there
    st = find_straggler(decompose(*_loader_at_checkpoint(3, 0.12)))
    assert st is not None and (st.host, st.phase, st.host_level) == ("h3", "data", True)
    assert abs(st.excess_s - 0.12) < 0.01
    # the writes' own spread is no straggler
    assert find_straggler(decompose(*_loader_at_checkpoint(None, 0.0))) is None
