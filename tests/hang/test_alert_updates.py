"""An open job_hang alert follows the hang answer (service/hang/alert.py) on the real database: when
its suspects change (who, where, why, the NCCL RAS state included) the stored alert is rewritten and
one `updated` notification per webhook is queued, keyed by the alert's revision; polls that find
nothing new queue and write nothing; the resolve notice still follows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import pytest

from fabricscope.service.alerts import payloads
from fabricscope.service.hang.alert import run_once
from tests.hang.test_alert import SETTINGS, _alerts, _event, _job, _steps
from tests.hang.test_ras import _ras, rank


@pytest.fixture
def hook(db_conn: psycopg.Connection) -> Iterator[int]:
    """A job_hang webhook of this test's own (removed after it: the database is shared)."""
    row = db_conn.execute("INSERT INTO webhooks (url, events, format) VALUES ('https://ops.example/h', "
                          "ARRAY['job_hang'], 'generic') RETURNING id").fetchone()
    assert row is not None
    yield int(row[0])
    db_conn.execute("DELETE FROM webhooks WHERE id = %s", (row[0],))


def _queued(conn: psycopg.Connection, hook: int, job: str) -> list[tuple[str, str, dict[str, Any]]]:
    rows = conn.execute("""SELECT d.status, d.idempotency_key, d.body FROM deliveries d JOIN alerts a
                           ON a.id = d.alert_id WHERE d.webhook_id = %s AND a.job = %s ORDER BY d.id""",
                        (hook, job)).fetchall()
    return [(r[0], r[1], orjson.loads(r[2])) for r in rows]


def _who(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(s["rank"], s["state"], s.get("ras_state")) for s in summary["suspects"]]


def _updated_at(conn: psycopg.Connection, job: str) -> Any:
    row = conn.execute("SELECT updated_at FROM alerts WHERE job = %s AND kind = 'job_hang'", (job,)).fetchone()
    return row[0] if row else None


def test_suspects_changing_during_the_episode_update_the_alert_once_each(db_conn: psycopg.Connection,
                                                                          hook: int) -> None:
    job = _job(db_conn)  # ranks 0-2 on node0-node2
    _steps(db_conn, job, last_end=time.time() - 5)
    for r in (0, 1):  # ranks 0 and 1 wait in seq 11; rank 2 never entered it
        _event(db_conn, job, "collective_entered", time.time() - 4, {"rank": r, "group": "world", "seq": 11,
                                                                     "op": "all_reduce", "step": 10})
    run_once(db_conn, settings=SETTINGS)
    ((state, summary),) = _alerts(db_conn, job)
    assert state == "firing" and _who(summary) == [(2, "not_entered", None)] and summary.get("revision", 0) == 0
    (aid,) = db_conn.execute("SELECT id FROM alerts WHERE job = %s", (job,)).fetchone() or ()
    stamp = _updated_at(db_conn, job)
    run_once(db_conn, settings=SETTINGS)
    run_once(db_conn, settings=SETTINGS)  # nothing new: no notice, the record is not rewritten
    assert [q[:2] for q in _queued(db_conn, hook, job)] == [("firing", f"fabricscope-alert-{aid}-firing-0")]
    assert _updated_at(db_conn, job) == stamp

    # NCCL RAS, after the collective records were stored, finds rank 2 dead and rank 1 unresponsive
    _ras(db_conn, source="node1:nccl-ras", ts=time.time(), job=job,
         ranks=[rank(2, "dead", host="10.0.0.2", pid=77), rank(1, "unresponsive")])
    run_once(db_conn, settings=SETTINGS)
    run_once(db_conn, settings=SETTINGS)
    ((state, summary),) = _alerts(db_conn, job)
    assert _who(summary) == [(1, "ras_unresponsive", "ras_unresponsive"), (2, "not_entered", "ras_dead")]
    assert state == "firing" and summary["revision"] == 1 and summary["waiting"] == [0]
    queued = _queued(db_conn, hook, job)
    assert [q[:2] for q in queued] == [("firing", f"fabricscope-alert-{aid}-firing-0"),
                                       ("updated", f"fabricscope-alert-{aid}-updated-1")]
    body = queued[1][2]
    assert (body["event"], body["status"]) == ("job_hang", "updated")
    assert _who(body["alert"]["hang"]) == _who(summary) and body["alert"]["state"] == "firing"
    assert body["summary"].startswith(f"[updated] job {job}: hung") and "suspects now: rank 1" in body["summary"]
    assert "NCCL RAS ras_dead" in body["summary"]

    # the agent's next report is clean: the RAS facts go, one more update
    _ras(db_conn, source="node1:nccl-ras", ts=time.time() + 0.001, job=job, ranks=[])
    run_once(db_conn, settings=SETTINGS)
    ((_, summary),) = _alerts(db_conn, job)
    assert summary["revision"] == 2 and _who(summary) == [(2, "not_entered", None)]
    assert [q[0] for q in _queued(db_conn, hook, job)] == ["firing", "updated", "updated"]
    assert _queued(db_conn, hook, job)[2][1] == f"fabricscope-alert-{aid}-updated-2"

    db_conn.execute("INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s) VALUES "
                    "(%s, 0, 10, now() - interval '1 second', now(), 1.0)", (job,))
    run_once(db_conn, settings=SETTINGS)
    assert [a[0] for a in _alerts(db_conn, job)] == ["resolved"]
    assert [q[:2] for q in _queued(db_conn, hook, job)][3] == ("resolved", f"fabricscope-alert-{aid}-resolved-0")


def test_suspects_known_only_after_the_firing_are_sent_as_an_update(db_conn: psycopg.Connection,
                                                                     hook: int) -> None:
    job = _job(db_conn)
    _steps(db_conn, job, last_end=time.time() - 5)
    run_once(db_conn, settings=SETTINGS)  # the steps stopped before any in-flight notice came
    ((_, summary),) = _alerts(db_conn, job)
    assert summary["suspects"] == []
    for r in (0, 1):
        _event(db_conn, job, "collective_entered", time.time() - 4, {"rank": r, "group": "world", "seq": 11,
                                                                     "op": "all_reduce", "step": 10})
    run_once(db_conn, settings=SETTINGS)
    run_once(db_conn, settings=SETTINGS)
    queued = _queued(db_conn, hook, job)
    assert [q[0] for q in queued] == ["firing", "updated"]
    assert _alerts(db_conn, job)[0][1]["revision"] == 1
    assert "suspects not known yet" in queued[0][2]["summary"]
    assert _who(queued[1][2]["alert"]["hang"]) == [(2, "not_entered", None)]


def test_the_update_notice_reads_as_one_in_every_format() -> None:
    suspect = {"rank": 2, "host": "n2", "group": "world", "seq": 11, "op": "all_reduce", "state": "not_entered",
               "ras_state": "ras_dead"}
    alert = {"id": 5, "kind": payloads.HANG_KIND, "job": "j", "started_at": "t", "detected_at": "d",
             "hang": {"suspects": [suspect], "waiting": [0, 1], "revision": 1}}
    now = datetime.now(UTC)
    slack = payloads.slack(alert, status="updated", key="k", now=now)
    assert slack["text"] == ("[updated] job j: hung, no step since t; suspects now: rank 2 (n2) not_entered "
                             "all_reduce group world seq 11, NCCL RAS ras_dead")
    assert "waiting ranks: [0, 1]" in slack["blocks"][0]["text"]["text"]  # the cause line, as when firing
    pd = payloads.pagerduty(alert, status="updated", key="k", now=now, routing_key="rk")
    assert (pd["event_action"], pd["dedup_key"], pd["payload"]["severity"]) == ("trigger", "fabricscope-alert-5",
                                                                                "critical")
