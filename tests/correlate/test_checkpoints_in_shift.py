"""A long fault's checkpoint steps (#15, held-back seed 703 run 6, its step summaries as the engine read
them from the database): a +11 % PCIe downtrain lasting 37 steps (19-55) slowed every step, the
checkpoint steps too. A checkpoint step's extra over the healthy baseline was learnt as the
checkpoint's norm whenever that step was not flagged at the time, and the fault's first checkpoint
steps came before the shift was proven: the later ones (40, 50) then measured +1.6 % over a baseline
that held the fault and were healthy. A checkpoint step's extra is learnt only while no excursion is
open, so they stay slow, and the checkpoint baseline after the fault is the healthy one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fabricscope.service.correlate.case import _baselines_for

SUMMARIES = Path(__file__).parent / "data" / "seed703_run6_step_summaries.csv"


def test_a_long_faults_checkpoint_steps_stay_slow() -> None:
    df = pd.read_csv(SUMMARIES)
    bl = _baselines_for(df)
    ckpt = df["ckpt_max"].fillna(0) > 0
    inside = [int(s) for s in df.loc[ckpt & df["step"].between(19, 55), "step"]]
    assert inside == [20, 30, 40, 50]
    assert all(bl.slow[s] for s in inside), [(s, bool(bl.slow[s]), float(bl.base[s])) for s in inside]
    after = [int(s) for s in df.loc[ckpt & (df["step"] > 57), "step"]]
    assert after and not any(bl.slow[s] for s in after)
    # every step the simulator slowed is slow, and no healthy one (empty: neither, not judged)
    known = df["truth_slow"].notna().to_numpy()
    truth = df["truth_slow"].astype(str).eq("True").to_numpy()
    assert bool(bl.slow[known & truth].all()), [int(s) for s in df["step"][known & truth & ~bl.slow]]
    assert not bool(bl.slow[known & ~truth & (df["step"] > 16).to_numpy()].any())
