"""The Job overview dashboard's "Hang: suspects" panel on the real database schema (the migrated
test database), with the open job_hang alert the real alert loop (service/hang/alert.py) wrote for a
hung job that NCCL RAS reports on: the panel's query, expanded as Grafana expands it, has the RAS
columns (`source`, `ras_state`) and shows which suspects NCCL RAS named. The simulated-cluster
suite (test_dashboards.py) runs it too, where no job hangs; tests/hang/test_hang_e2e.py on a real
hung gloo job."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import psycopg

from fabricscope.service.hang.alert import run_once
from tests.hang.test_alert import SETTINGS, _event, _steps
from tests.hang.test_ras import _job, _ras, rank
from tools.grafana_sql import Context, expand, load_dashboards, queries

PANEL = "panel 'Hang: suspects' A"


def _rows(conn: psycopg.Connection, job: str) -> list[dict[str, Any]]:
    (q,) = [q for q in queries("job-overview.json", load_dashboards()["job-overview.json"]) if q.where == PANEL]
    now = datetime.now().astimezone()
    cur = conn.execute(expand(q.sql, Context(now, now, {"job": [job]})))
    cols = [d.name for d in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_the_panel_names_the_source_and_the_ras_state_of_each_suspect(db_conn: psycopg.Connection) -> None:
    job = _job(db_conn)  # ranks 0-2, hosts of their own
    _steps(db_conn, job, last_end=time.time() - 5)
    for r in (0, 1):  # ranks 0 and 1 wait in seq 11; rank 2 never entered it
        _event(db_conn, job, "collective_entered", time.time() - 4, {"rank": r, "group": "world", "seq": 11,
                                                                     "op": "all_reduce", "step": 10})
    _ras(db_conn, source=f"{job}-n1:nccl-ras", ts=time.time(), job=job,
         ranks=[rank(2, "dead"), rank(1, "unresponsive")])
    run_once(db_conn, settings=SETTINGS)
    got = [{k: r[k] for k in ("status", "rank", "group", "seq", "state", "source", "ras_state", "waiting")}
           for r in _rows(db_conn, job)]
    assert got == [
        {"status": "hung", "rank": 1, "group": None, "seq": None, "state": "ras_unresponsive", "source": "nccl_ras",
         "ras_state": "ras_unresponsive", "waiting": "0"},
        {"status": "hung", "rank": 2, "group": "world", "seq": 11, "state": "not_entered", "source": "collectives",
         "ras_state": "ras_dead", "waiting": "0"}]
    (quiet,) = _rows(db_conn, "no-such-job")  # no open alert: one row, the RAS columns empty
    assert quiet["status"] == "not hung" and {"source", "ras_state"} <= set(quiet)
    assert quiet["source"] is None and quiet["ras_state"] is None
