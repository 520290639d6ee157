"""Must be shown (#48): on a simulated fleet (30 jobs over 10 days, a cable degrading from day 4, a GPU
throttling in 3 jobs, background noise) the cable ranks first from day 5 and the GPU second, the
component_degraded alert fires once, for the cable, through the webhooks, and the ranking holds
against another draw of the noise. Attributions go in through the engine's storage call; the
service's own background job rolls the ledger; the answers come from the HTTP API."""

from __future__ import annotations

from datetime import timedelta

import httpx
import orjson
import psycopg
import pytest

from fabricscope.service.fleet.alerts import run_once
from fabricscope.service.settings import Settings
from tests.fleet.conftest import rolled
from tests.fleet.fleetsim import CABLE, CABLE_DAY, DAYS, GPU, RANKS, Fleet, expected_ranking, fleet_start, write_day

# 1 day windows: the cable's day 4 (~0.8 GPU-h) stays under 1 GPU-h, from day 5 it is over; 5 jobs a
# day never happen (3 jobs a day), so only the GPU-hours bar can fire here.
ALERT = {"fleet_alert_gpu_hours": 1.0, "fleet_alert_jobs": 5, "fleet_alert_window_days": 1,
         "fleet_alert_clear_ratio": 0.5}


def _settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, **ALERT)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [0, 1])
def test_cable_first_gpu_second_alert_once(api: httpx.Client, fleet_db: str, seed: int) -> None:
    fleet = Fleet(fleet_start(seed), seed)
    hook = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:9/fleet-{seed}", "events": ["component_degraded"]})
    assert hook.status_code == 201, hook.text
    hook_id = hook.json()["id"]
    fired_on: list[int] = []
    for d in range(DAYS):
        write_day(api, fleet_db, fleet, d)
        rolled(fleet_db)
        end = fleet.day(d + 1)
        with psycopg.connect(fleet_db) as conn:
            if run_once(conn, settings=_settings(fleet_db), now=end - timedelta(seconds=1))["fired"]:
                fired_on.append(d)
        got = api.get("/v1/fleet/components", params={"from": fleet.day(0).isoformat(), "to": end.isoformat(),
                                                      "limit": 5})
        assert got.status_code == 200, got.text
        rows = got.json()["components"]
        want = expected_ranking(fleet, 0, d)
        # the ledger's GPU-hours are the simulated ones (excess x cause share x ranks), component by component
        for r in rows:
            assert r["gpu_hours"] == pytest.approx(dict(want)[r["component"]] / 3600, abs=1e-6), r
        assert [r["component"] for r in rows] == [c for c, _ in want[:5]]
        if d >= CABLE_DAY + 1:
            assert [r["component"] for r in rows[:2]] == [CABLE, GPU], (d, rows[:3])
            cable, gpu = rows[0], rows[1]
            assert cable["layer"] == "link" and cable["kind"] == "link"
            assert cable["jobs"] == 3 * (d - CABLE_DAY + 1)
            assert cable["first_seen"].startswith(fleet.day(CABLE_DAY).date().isoformat())
            assert cable["top_evidence"]["evidence"] == f"rx_fcs_errors_total on {CABLE}"
            assert gpu["kind"] == "gpu" and gpu["layer"] == "compute"
    assert fired_on == [CABLE_DAY + 1]  # once, the day it crossed the bar, never again while degraded

    with psycopg.connect(fleet_db) as conn:
        alerts = conn.execute("SELECT job, state, summary FROM alerts WHERE kind = 'component_degraded' "
                              "AND started_at >= %s AND started_at < %s", (fleet.day(0), fleet.day(DAYS))).fetchall()
        assert [(a[0], a[1]) for a in alerts] == [(CABLE, "firing")]
        # a day with the cable repaired: under half the bar, so it resolves (once)
        res = run_once(conn, settings=_settings(fleet_db), now=fleet.day(DAYS + 1))
        assert res["resolved"] >= 1
        body = orjson.loads(conn.execute("SELECT body FROM deliveries WHERE webhook_id = %s AND status = 'firing'",
                                         (hook_id,)).fetchone()[0])  # type: ignore[index]
    f = body["alert"]["fleet"]
    assert body["event"] == "component_degraded" and f["component"] == CABLE and f["layer"] == "link"
    assert f["evidence"] == f"rx_fcs_errors_total on {CABLE}"
    assert sorted(f["jobs"]) == sorted(fleet.job(CABLE_DAY + 1, k) for k in range(3))
    cable_day5 = dict(expected_ranking(fleet, CABLE_DAY + 1, CABLE_DAY + 1))[CABLE]
    assert f["gpu_hours_lost"] == pytest.approx(cable_day5 / 3600, abs=1e-6)

    # the change against the previous window of the same length: days 5-9 against days 0-4
    got = api.get("/v1/fleet/components", params={"from": fleet.day(5).isoformat(),
                                                  "to": fleet.day(DAYS).isoformat()}).json()
    cable = got["components"][0]
    assert cable["component"] == CABLE
    prev = dict(expected_ranking(fleet, 0, 4))[CABLE] / 3600
    assert cable["previous_gpu_hours"] == pytest.approx(prev, abs=1e-6)
    assert cable["change_gpu_hours"] == pytest.approx(cable["gpu_hours"] - prev, abs=1e-6)
    assert cable["worst_jobs"][0]["job"].startswith(f"fleet{seed}-d9-")

    layers = api.get("/v1/fleet/layers", params={"from": fleet.day(0).isoformat(),
                                                 "to": fleet.day(DAYS).isoformat()}).json()["layers"]
    assert layers[0]["layer"] == "link"

    inc = api.get(f"/v1/fleet/components/{GPU}", params={"from": fleet.day(0).isoformat(),
                                                         "to": fleet.day(DAYS).isoformat(), "gap": 30})
    assert inc.status_code == 200, inc.text
    incidents = inc.json()["incidents"]
    assert [i["job"] for i in incidents] == [fleet.job(d, 1) for d in (7, 5, 2)]  # latest first
    assert all(i["slow_steps"] == 60 and i["ranks"] == RANKS for i in incidents)
    assert incidents[0]["counters"][0]["metric"] == "gpu_clock_throttle_reasons"
    assert sum(i["gpu_hours"] for i in incidents) == pytest.approx(inc.json()["summary"]["gpu_hours"], abs=1e-6)
