"""episode.py on the real database: a slow step of a sustained episode whose own answer is weak lists
the episode's best-evidenced cause first (a switch sampled every 6 s leaves some 2-s steps of a long
link-error fault with only a faint pause of one NIC to show); a strong own answer, or one naming the
episode's cause, is kept."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg

from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate.baseline import Baselines
from fabricscope.service.correlate.constants import DEFAULT_CONFIG
from fabricscope.service.correlate.episode import from_episode
from fabricscope.service.correlate.records import Attribution
from fabricscope.service.correlate.rules import ids

N = 6
LINK, NIC = "leaf7:p12", "h3:nic1"


def _bl() -> Baselines:
    z = np.zeros(N)
    return Baselines(base=z + 2.0, base_transfer=z, threshold=z + 2.2, slow=np.ones(N, bool), live=np.ones(N, bool),
                     episode=np.zeros(N, int), step_slow=np.zeros(N, bool), sigma=z + 0.02, centre=z + 2.0,
                     sigma_transfer=z + 0.002, borderline=np.zeros(N, bool), faint=np.zeros(N, bool),
                     ckpt_faint=np.zeros(N, bool), net_only=np.zeros(N, bool), data_only=np.zeros(N, bool),
                     net_timing=np.zeros(N, bool),
                     data_timing=np.zeros(N, bool),
                     near_slow=np.zeros(N, bool))


def _answer(step: int, layer: str, component: str | None, conf: float) -> Attribution:
    causes: list[Any] = [] if component is None else [{"layer": layer, "component": component, "lost_s": 0.2,
                                                       "confidence": conf}]
    return {"step": step, "slow": True, "duration_s": 2.2, "baseline_s": 2.0, "start": "2026-12-01T00:00:00+00:00",
            "layer": layer, "component": component, "confidence": conf, "lost_s": 0.2, "evidence": [],
            "causes": causes}


def _borrow(conn: psycopg.Connection, job: str, out: Attribution) -> Attribution:
    for s in range(N - 1):  # the episode's other steps named the link with its symbol errors
        q.store_attribution(conn, job=job, attribution=_answer(s, "link", LINK, 0.9))
    summ = pd.DataFrame({"step": np.arange(N), "dur": np.full(N, 2.2)})
    from_episode(conn, out, job=job, summ=summ, bl=_bl(), i=N - 1, cfg=DEFAULT_CONFIG, attribute=lambda s: None)
    return out


def test_a_weak_own_cause_follows_the_episode_cause(db_conn: psycopg.Connection) -> None:
    out = _borrow(db_conn, "ep-weak", _answer(N - 1, "fabric", NIC, 0.12))
    assert (out["layer"], out["component"]) == ("link", LINK)
    assert out["confidence"] == round(0.9 * DEFAULT_CONFIG.episode_confidence_factor, 3)
    assert [c["component"] for c in out["causes"]] == [LINK, NIC]  # its own cause still listed, second
    assert out["causes"][0]["lost_s"] == 0.2  # the lost time is not counted twice
    assert out["evidence"][0]["kind"] == "episode" and out["evidence"][0]["value"] == 0.0
    assert out["rules"]["cause"] == ids.CAUSE_EPISODE and out["causes"][0]["rule"] == ids.CAUSE_EPISODE


def test_a_strong_own_cause_is_kept(db_conn: psycopg.Connection) -> None:
    out = _borrow(db_conn, "ep-strong", _answer(N - 1, "fabric", NIC, 0.7))
    assert (out["layer"], out["component"], out["confidence"]) == ("fabric", NIC, 0.7)
    assert not out["evidence"]
    assert "rules" not in out  # the episode rule did not decide it


def test_a_nameless_step_borrows_and_a_step_naming_the_episode_cause_is_unchanged(db_conn: psycopg.Connection) -> None:
    out = _borrow(db_conn, "ep-unknown", _answer(N - 1, "unknown", None, 0.1))
    assert (out["layer"], out["component"]) == ("link", LINK)
    assert out["rules"]["cause"] == ids.CAUSE_EPISODE and [c["rule"] for c in out["causes"]] == [ids.CAUSE_EPISODE]
    same = _borrow(db_conn, "ep-same", _answer(N - 1, "link", LINK, 0.1))
    assert (same["confidence"], same["evidence"]) == (0.1, []) and "rules" not in same
