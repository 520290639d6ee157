"""The ledger's arithmetic on the cases the engine can write: several causes (shares), causes without
a share (even split), no cause list, a negative or NaN excess, a step re-attributed healthy, a job
with no placement (its world_size label, else one rank, reported). Rolled by the service's own job."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest

from fabricscope.service.correlate.queries import store_attribution
from tests.fleet.conftest import rolled

DAY = datetime(2025, 6, 1, tzinfo=UTC)
pytestmark = pytest.mark.usefixtures("fleet_svc")  # its fleet job rolls


def _att(step: int, lost: float | None, causes: list[dict[str, Any]], *, layer: str = "fabric",
         component: str | None = "leafX:Ethernet1", slow: bool = True) -> dict[str, Any]:
    return {"step": step, "start": (DAY + timedelta(hours=1, seconds=step)).isoformat(), "slow": slow,
            "duration_s": 3.0, "baseline_s": 2.0, "layer": layer, "component": component, "confidence": 0.5,
            "lost_s": lost, "evidence": [], "causes": causes}


def _ledger(conn: psycopg.Connection, job: str) -> dict[str, tuple[int, float, int]]:
    return {f"{r[0]}/{r[1]}": (int(r[2]), float(r[3]), int(r[4])) for r in conn.execute(
        "SELECT layer, component, slow_steps, gpu_s, ranks FROM fleet_ledger WHERE job = %s", (job,)).fetchall()}


def test_shares_splits_and_corrupt_values(fleet_db: str) -> None:
    job = "rollup-edge"
    with psycopg.connect(fleet_db) as conn:
        conn.execute("INSERT INTO jobs (name, labels) VALUES (%s, '{\"world_size\": \"8\"}')", (job,))
        for a in (
            _att(1, 2.0, [{"layer": "link", "component": "c1", "lost_s": 1.5},
                          {"layer": "nic", "component": "n1", "lost_s": 0.5}]),        # 3:1 shares
            _att(2, 1.0, [{"layer": "link", "component": "c1"}, {"layer": "host", "component": "h1"}]),  # even
            _att(3, 1.0, [], layer="storage", component="nas:/x"),                   # no cause list: whole
            _att(4, -5.0, [{"layer": "link", "component": "c1", "lost_s": -5.0}]),   # negative: nothing
            _att(5, math.nan, [{"layer": "link", "component": "c1", "lost_s": 1.0}]),  # NaN: nothing
            _att(6, 1.0, [{"layer": "unknown", "component": None, "lost_s": 1.0}]),   # unnamed: layer only
            _att(7, 4.0, [{"layer": "link", "component": "c1", "lost_s": 4.0}]),
        ):
            store_attribution(conn, job=job, attribution=a)
        conn.commit()
    rolled(fleet_db)
    with psycopg.connect(fleet_db) as conn:
        got = _ledger(conn, job)
        assert got["link/c1"] == (5, pytest.approx((1.5 + 0.5 + 0 + 0 + 4.0) * 8), 8)
        assert got["nic/n1"] == (1, pytest.approx(0.5 * 8), 8)
        assert got["host/h1"] == (1, pytest.approx(0.5 * 8), 8)
        assert got["storage/nas:/x"] == (1, pytest.approx(8.0), 8)
        assert got["unknown/"] == (1, pytest.approx(8.0), 8)
        assert all(v[1] >= 0 for v in got.values())
        # the engine re-attributes step 7 healthy: the re-roll takes its loss back out
        store_attribution(conn, job=job, attribution=_att(7, 0.0, [], slow=False))
        conn.commit()
    rolled(fleet_db)
    with psycopg.connect(fleet_db) as conn:
        assert _ledger(conn, job)["link/c1"] == (4, pytest.approx(2.0 * 8), 8)


def test_placement_counts_ranks_else_one(fleet_db: str) -> None:
    with psycopg.connect(fleet_db) as conn:
        conn.execute("INSERT INTO jobs (name) VALUES ('rollup-placed'), ('rollup-bare')")
        conn.execute("INSERT INTO job_ranks (job, rank, host) SELECT 'rollup-placed', r, 'h' || r "
                     "FROM generate_series(0, 15) r")
        for job in ("rollup-placed", "rollup-bare"):
            store_attribution(conn, job=job, attribution=_att(1, 1.0, [{"layer": "link", "component": "c9",
                                                                         "lost_s": 1.0}]))
        conn.commit()
    rolled(fleet_db)
    with psycopg.connect(fleet_db) as conn:
        assert _ledger(conn, "rollup-placed")["link/c9"] == (1, pytest.approx(16.0), 16)
        assert _ledger(conn, "rollup-bare")["link/c9"] == (1, pytest.approx(1.0), 1)


def test_api_rejects_bad_queries_with_the_field(api: Any) -> None:
    for params, field in (({"from": "2025-01-01T00:00:00"}, "from"), ({"kind": "toaster"}, "kind"),
                          ({"limit": "0"}, "limit"), ({"from": "2025-02-01T00:00:00Z", "to": "2025-01-01T00:00:00Z"},
                                                     "to"), ({"layer": "bogus"}, "layer")):
        r = api.get("/v1/fleet/components", params=params)
        assert r.status_code == 422, (params, r.text)
        assert field in r.text
    assert api.get("/v1/fleet/components/never-seen").status_code == 404
    assert api.get("/v1/jobs/nope-a/compare/nope-b").status_code == 404


def test_daily_digest_once_a_day_through_the_webhooks(api: Any, fleet_db: str) -> None:
    from fabricscope.service.fleet.alerts import digest
    from fabricscope.service.settings import Settings

    day = datetime(2025, 7, 1, tzinfo=UTC)
    hook = api.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/digest", "events": ["fleet_digest"]}).json()
    with psycopg.connect(fleet_db) as conn:
        conn.execute("INSERT INTO jobs (name, labels) VALUES ('digest-job', '{\"world_size\": \"2\"}')")
        att = _att(1, 3.0, [{"layer": "link", "component": "cable-d", "lost_s": 3.0}])
        att["start"] = (day + timedelta(hours=3)).isoformat()
        store_attribution(conn, job="digest-job", attribution=att)
        conn.commit()
    rolled(fleet_db)
    settings = Settings(database_url=fleet_db, fleet_digest_hour=6)  # type: ignore[arg-type]
    with psycopg.connect(fleet_db) as conn:
        assert digest(conn, settings=settings, now=day + timedelta(hours=5)) == 0  # before its hour
        assert digest(conn, settings=settings, now=day + timedelta(hours=7)) == 1
        assert digest(conn, settings=settings, now=day + timedelta(hours=20)) == 0  # once a day
        conn.commit()
        (body,) = conn.execute("SELECT body FROM deliveries WHERE webhook_id = %s", (hook["id"],)).fetchone()
    doc = orjson.loads(body)
    assert doc["event"] == "fleet_digest"
    assert doc["alert"]["fleet"]["components"][0] == {"component": "cable-d", "layer": "link",
                                                       "gpu_hours_lost": pytest.approx(6.0 / 3600, abs=1e-6),
                                                       "jobs_affected": 1, "evidence": None}
