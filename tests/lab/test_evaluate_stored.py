"""The lab's time to first attribution in ``--answers stored`` mode: when a slow step's stored
answer was first right, not when the lab asked (pure: no lab, no database)."""

from __future__ import annotations

from tests.lab.evaluate import Window, evaluate

WINDOW = Window("link_flap", "flap", start=100.0, end=102.0, layers=("link",), component="leaf2:swp1")
STEPS = [{"step": 7, "t0": 99.5, "duration_s": 3.0, "slow": True},
         {"step": 8, "t0": 102.5, "duration_s": 1.0, "slow": True}]
FINAL = {7: {"layer": "link", "component": "leaf2:swp1"}, 8: {"layer": "link", "component": "leaf2:swp1"}}


def test_stored_times_count_from_the_first_right_stored_answer() -> None:
    # step 7 was first stored as unknown (the link counter not in yet), restated right at 106.4;
    # step 8 (not in the window) does not count
    stored = {7: [(104.0, "unknown", None), (106.4, "link", "leaf2:swp1")], 8: [(105.0, "link", "leaf2:swp1")]}
    [r], _ = evaluate(STEPS, FINAL, [WINDOW], {7: 103.0}, grace_s=4.0, judged_from=0.0, stored=stored)
    assert r.slow == 1 and r.component_ok == 1
    assert r.first_attribution_s is not None and abs(r.first_attribution_s - 6.4) < 1e-9


def test_no_right_stored_answer_is_no_time_even_when_the_final_answer_is_right() -> None:
    stored = {7: [(104.0, "unknown", None)]}
    [r], _ = evaluate(STEPS, FINAL, [WINDOW], {7: 103.0}, grace_s=4.0, judged_from=0.0, stored=stored)
    assert r.component_ok == 1 and r.first_attribution_s is None


def test_asked_mode_keeps_the_fetch_time_of_a_right_answer() -> None:
    [r], _ = evaluate(STEPS, FINAL, [WINDOW], {7: 103.0}, grace_s=4.0, judged_from=0.0)
    assert r.first_attribution_s is not None and abs(r.first_attribution_s - 3.0) < 1e-9
