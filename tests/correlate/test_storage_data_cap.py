"""A storage cause without a straggler explains time spent reading (#15, found in the fabric lab): a
shared volume that is anomalous while the ranks' `data` phase stayed short does not take the step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fabricscope.service.correlate.causes import work_cause
from fabricscope.service.correlate.localize import build_topo, candidates, finish_scores, series_groups

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
    waiting = work_cause(None, ev, topo, 1.0, data_s=0.011, work_s=0.26)
    assert waiting["layer"] == "unknown"
    # the same volume while the ranks spent the lost time in `data`: named
    reading = work_cause(None, ev, topo, 1.0, data_s=0.27, work_s=0.26)
    assert (reading["layer"], reading["component"]) == ("storage", "qq7:w3")
    # a job that records no phases: nothing to cap with, the volume is named as before
    assert work_cause(None, ev, topo, 1.0, data_s=None, work_s=0.26)["layer"] == "storage"
