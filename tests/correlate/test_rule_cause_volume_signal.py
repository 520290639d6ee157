"""A storage cause without a straggler explains time spent reading (#15, found in the fabric lab): a
shared volume that is anomalous while the ranks' `data` phase stayed short does not take the step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fabricscope.service.correlate.causes import WorkLoss, work_cause
from fabricscope.service.correlate.localize import Topo, build_topo, candidates, finish_scores, series_groups
from fabricscope.service.correlate.rules import ids

RANKS = pd.DataFrame({"host": ["h1", "h2"], "gpu": ["g0", "g0"], "nic": ["n0", "n0"]})
NO_LINKS = pd.DataFrame({"a": [], "b": []})
VOLUMES = ["qq7:w3"]  # a storage system's volume: no peers


def _evidence() -> pd.DataFrame:
    """The shared volume's read latency at 1.9 ms against its usual 0.5 ms: a few sigmas up."""
    topo = build_topo(RANKS, NO_LINKS, VOLUMES)
    meta = series_groups(pd.DataFrame({"series_id": [1], "source": VOLUMES, "metric": ["read_latency_seconds"],
                                       "kind": ["gauge"], "labels": ["{}"]}), topo)
    out = pd.DataFrame({"series_id": [1], "cur": [0.0019], "peer_med": [0.0019], "peer_mad": [0.0],
                        "peer_z": [np.nan], "cur_w": [0.0019]})
    hist = pd.DataFrame({"series_id": [1], "hist_med": [0.0005], "hist_sigma": [0.0001]})
    return candidates(finish_scores(out, meta, hist), topo)


def test_a_volume_cannot_explain_lost_work_the_ranks_did_not_spend_reading() -> None:
    ev = _evidence()
    topo = build_topo(RANKS, NO_LINKS, VOLUMES)
    assert len(ev) == 1  # the volume is a storage candidate on its own
    # 0.26 s of local work lost, data phases of 11 ms: not the volume's time
    waiting = work_cause(None, ev, topo, 1.0, loss=WorkLoss(data_s=0.011, work_s=0.26))
    assert waiting["layer"] == "unknown" and waiting["rule"] == ids.CAUSE_UNKNOWN
    # the same volume while the ranks spent the lost time in `data`: named
    reading = work_cause(None, ev, topo, 1.0, loss=WorkLoss(data_s=0.27, work_s=0.26))
    assert (reading["layer"], reading["component"]) == ("storage", "qq7:w3")
    assert reading["rule"] == ids.CAUSE_VOLUME_SIGNAL
    # a job that records no phases: nothing to cap with, the volume is named as before
    assert work_cause(None, ev, topo, 1.0, loss=WorkLoss(data_s=None, work_s=0.26))["layer"] == "storage"


def _write_latency(volume: str, peers: list[str]) -> tuple[pd.DataFrame, Topo]:
    """779 run 20 step 20: a host's checkpoint volume at 20 ms a write against its peers' 4 ms."""
    vols = [volume, *peers]
    topo = build_topo(RANKS, NO_LINKS, vols, checkpoint_sources=frozenset(vols))
    meta = series_groups(pd.DataFrame({"series_id": range(1, len(vols) + 1), "source": vols,
                                       "metric": "write_latency_seconds", "kind": "gauge", "labels": "{}"}), topo)
    out = pd.DataFrame({"series_id": [1], "cur": [0.020], "peer_med": [0.0042], "peer_mad": [0.0003],
                        "peer_z": [8.2], "cur_w": [0.020]})
    hist = pd.DataFrame({"series_id": [1], "hist_med": [0.0005], "hist_sigma": [0.00004]})
    return candidates(finish_scores(out, meta, hist), topo), topo


def test_a_checkpoint_volume_explains_lost_work_the_ranks_spent_writing_their_checkpoint() -> None:
    """With no straggler (the hosts' write times too close) and short reads, a volume the job's
    checkpoints go to, slow in the step's seconds, takes the time a checkpoint step's write holds;
    not at a step without a checkpoint, not a volume the checkpoints do not go to, and not when the
    write is too short to hold the lost time."""
    ev, topo = _write_latency("h1:/mnt/md0", ["h2:/mnt/md0"])
    assert len(ev) == 1
    kw: dict[str, Any] = {"data_s": 0.06, "work_s": 0.19}
    at_ckpt = work_cause(None, ev, topo, 1.0, loss=WorkLoss(ckpt_s=0.96, **kw))
    assert (at_ckpt["layer"], at_ckpt["component"]) == ("storage", "h1:/mnt/md0")
    assert at_ckpt["rule"] == ids.CAUSE_VOLUME_SIGNAL
    assert [e["metric"] for e in at_ckpt["evidence"]] == ["write_latency_seconds"]
    assert work_cause(None, ev, topo, 1.0, loss=WorkLoss(**kw))["layer"] == "unknown"
    assert work_cause(None, ev, topo, 1.0, loss=WorkLoss(ckpt_s=0.05, **kw))["layer"] == "unknown"
    elsewhere = build_topo(RANKS, NO_LINKS, ["h1:/mnt/md0", "h2:/mnt/md0"], checkpoint_sources=frozenset({"h2:/x"}))
    assert work_cause(None, ev, elsewhere, 1.0, loss=WorkLoss(ckpt_s=0.96, **kw))["layer"] == "unknown"
