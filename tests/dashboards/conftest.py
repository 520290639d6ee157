"""A database filled by the cluster simulator through the real HTTP API, for the dashboard queries.

It is a database of its own (same server as the session's, or its own embedded one), with its own
API process: the dashboards' "All" choices and the topology must describe one cluster, and this
suite's `PUT /v1/topology` must not replace the topology other suites declared.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from fabricscope.service.fleet.rollup import refresh as fleet_refresh
from fabricscope.service.simulate.faults import FAULT_KINDS, Fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.send import HttpSink, send_scenario
from fabricscope.service.simulate.topology import ClusterSpec
from tests.dashboards import capacity_data
from tests.support import ServiceProcess, TestDatabase, start_service
from tools.grafana_sql import Context, load_dashboards, resolve_variables

JOB = "dash-llama-sim"
SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS = 90
DASH_KINDS = ["gpu_straggler", "host_contention", "nic_degradation", "link_errors", "link_flap", "fabric_congestion",
              "storage_slow"]
EVENT_KIND = {"leaf_down_pfc": "pfc_storm", "spine_pfc": "pfc_storm", "leaf_down_ecn": "ecn_burst",
              "leaf_up_ecn": "ecn_burst"}


@dataclass
class DashEnv:
    url: str  # database DSN
    api: str  # API base URL
    scenario: Scenario
    time_from: datetime
    time_to: datetime
    timescaledb: bool
    alerts_from_engine: bool

    def context(self, *, timescaledb: bool | None = None) -> Context:
        """Grafana's view: the job chosen, every multi-value variable on "All"."""
        ctx = Context(self.time_from, self.time_to, {"job": [JOB], "api": [self.api]},
                      timescaledb=self.timescaledb if timescaledb is None else timescaledb)
        with psycopg.connect(self.url, autocommit=True) as conn:
            return resolve_variables(conn, load_dashboards(), ctx)


def _fault_events(sc: Scenario) -> list[dict[str, Any]]:
    """What the host agent / switch collectors report for the injected network faults."""
    out = []
    for f in sc.faults:
        kind = "link_flap" if f.kind == "link_flap" else EVENT_KIND.get(f.variant)
        if f.kind not in FAULT_KINDS or kind is None:
            continue
        start = float(np.nanmin(sc.timeline.start[f.start_step])) + sc.t0
        end = float(np.nanmax(sc.timeline.end[f.start_step + f.steps - 1])) + sc.t0
        out.append({"kind": kind, "source": f.component, "start": start, "end": end,
                    "attrs": {"simulated_fault": f.kind, "severity": round(f.severity, 3)}})
    return out


def _alerts(conn: psycopg.Connection, url: str) -> bool:
    """Alerts from the alert engine when it is there; else one alert row shaped as it writes them."""
    try:
        from fabricscope.service.alerts.engine import run_once
        from fabricscope.service.settings import Settings

        # This run is short (90 steps, faults of a few steps): alert on regressions that last 4 steps.
        run_once(conn, settings=Settings(database_url=url, alert_min_steps=4, alert_recovery_steps=4))  # type: ignore[arg-type]
    except ImportError:
        pass
    if conn.execute("SELECT 1 FROM alerts WHERE job = %s", (JOB,)).fetchone():
        return True
    conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, since_step, resolved_at, baseline_s, current_s, lost_s,
                               summary)
           SELECT job, 'step_regression', 'resolved', min(step_start), min(step), max(step_start),
                  avg(baseline_s), avg(duration_s), sum(lost_s),
                  jsonb_build_object('layer', mode() WITHIN GROUP (ORDER BY layer))
           FROM attributions WHERE job = %s AND slow GROUP BY job""", (JOB,))
    return False


def _first_fault(sc: Scenario, kind: str, variant_suffix: str = "") -> Fault | None:
    return next((f for f in sc.faults if f.kind == kind and f.variant.endswith(variant_suffix)), None)


@pytest.fixture(scope="session")
def dash_env(tmp_path_factory: pytest.TempPathFactory, test_server_url: str | None) -> Iterator[DashEnv]:
    db = TestDatabase.create(test_server_url, tmp_path_factory.mktemp("dash-pg"))
    svc: ServiceProcess | None = None
    try:
        svc = start_service(db.url, tmp_path_factory.mktemp("dash-svc"))
        span = STEPS * 2.2 + 60
        # The kinds the panels' tests look for, fixed: a kind added to FAULT_KINDS must not reshuffle the plan.
        sc = generate(SPEC, job=JOB, steps=STEPS, faults=8, seed=3, kinds=DASH_KINDS,
                      t0=time.time() - span - 120)
        sink = HttpSink(svc.url)
        try:
            send_scenario(sink, sc)
            ev = _fault_events(sc)
            if ev:
                sink.post("events", {"batch_id": f"{JOB}-fault-events", "events": ev})
        finally:
            sink.close()
        # The report attributes every step (and stores the attributions the panels read).
        r = httpx.get(f"{svc.url}/v1/jobs/{JOB}/report", timeout=300)
        r.raise_for_status()
        capacity_data.fill(svc.url, db.url, sc, JOB)  # the Capacity dashboard's jobs, baseline, rollup
        with psycopg.connect(db.url) as conn:  # #48: the Fleet dashboard's ledger, as the service's fleet job rolls it
            fleet_refresh(conn)
        with psycopg.connect(db.url, autocommit=True) as conn:
            from_engine = _alerts(conn, db.url)
            ts = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone() is not None
            row = conn.execute("SELECT min(ts), max(ts) FROM samples").fetchone()
            assert row is not None and row[0] is not None, "the simulator sent no samples"
            lo, hi = row
        yield DashEnv(db.url, svc.url, sc, lo - timedelta(seconds=30), hi + timedelta(seconds=30), ts, from_engine)
    finally:
        if svc is not None:
            svc.stop()
        db.drop()


@pytest.fixture(scope="session")
def dash_ctx(dash_env: DashEnv) -> Context:
    return dash_env.context()


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
