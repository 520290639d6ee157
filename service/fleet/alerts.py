"""The `component_degraded` alert and the optional daily `fleet_digest` (#48), from the fleet ledger.

A component fires when, over the trailing `fleet_alert_window_days` UTC days, its lost GPU-hours reach
`fleet_alert_gpu_hours` or it slowed `fleet_alert_jobs` distinct jobs. It fires once per excursion:
the open alert (unique per (subject, kind), index `alerts_one_firing`) is the state, and it resolves
only when both figures fall below `fleet_alert_clear_ratio` of their bars (hysteresis: a component
hovering at the bar does not flap). The alert's `job` column holds the component (the alert's
subject); its body carries what a ticket needs: component, layer, kind, evidence, jobs, GPU-hours.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.alerts import payloads, store
from fabricscope.service.fleet.queries import Window, ranking
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts")

KIND = payloads.FLEET_KIND
DIGEST = payloads.DIGEST_KIND
DIGEST_SUBJECT = "fleet"

# Per component over the window: GPU-hours, distinct jobs; those near or over a bar, and every open one.
CANDIDATES_SQL = """
SELECT component, sum(gpu_s) / 3600.0 AS gpu_h, count(DISTINCT job) AS jobs FROM fleet_ledger
WHERE component <> '' AND day >= %(lo)s AND day < %(hi)s GROUP BY component
HAVING sum(gpu_s) / 3600.0 >= %(gh)s OR count(DISTINCT job) >= %(nj)s
   OR component IN (SELECT job FROM alerts WHERE kind = %(kind)s AND state = 'firing')
UNION ALL
SELECT job, 0, 0 FROM alerts a WHERE kind = %(kind)s AND state = 'firing' AND NOT EXISTS (
    SELECT 1 FROM fleet_ledger f WHERE f.component = a.job AND f.day >= %(lo)s AND f.day < %(hi)s)
"""


def _window(now: datetime, days: int) -> Window:
    n = now.astimezone(UTC)
    lo = datetime(n.year, n.month, n.day, tzinfo=UTC) - timedelta(days=days - 1)
    return Window(lo, n)


def _body(conn: psycopg.Connection, component: str, w: Window, settings: Settings) -> dict[str, Any]:
    rows = ranking(conn, by="component", window=w, layer=None, kind=None, limit=1, only=component)
    r = rows[0] if rows else {}
    jobs = conn.execute("SELECT DISTINCT job FROM fleet_ledger WHERE component = %s AND day >= %s AND day < %s "
                        "ORDER BY job LIMIT 100", (component, w.lo, w.hi)).fetchall()
    ev = r.get("top_evidence") or {}
    return {"component": component, "layer": r.get("layer"), "kind": r.get("kind"),
            "gpu_hours_lost": r.get("gpu_hours", 0.0), "jobs_affected": r.get("jobs", 0),
            "slow_steps": r.get("slow_steps", 0), "evidence": ev.get("evidence"),
            "jobs": [j[0] for j in jobs], "worst_jobs": r.get("worst_jobs", []),
            "first_seen": r["first_seen"].isoformat() if r.get("first_seen") else None,
            "last_seen": r["last_seen"].isoformat() if r.get("last_seen") else None,
            "window": {"from": w.lo.isoformat(), "to": w.hi.isoformat()},
            "thresholds": {"gpu_hours": settings.fleet_alert_gpu_hours, "jobs": settings.fleet_alert_jobs}}


def run_once(conn: psycopg.Connection, *, settings: Settings, now: datetime | None = None) -> dict[str, int]:
    """Judge every component once; `now` (default: the clock) ends the trailing window. One transaction."""
    now = now or datetime.now(UTC)
    w = _window(now, settings.fleet_alert_window_days)
    clear = settings.fleet_alert_clear_ratio
    fired = resolved = digests = 0
    with conn.transaction():
        rows = conn.execute(CANDIDATES_SQL, {"lo": w.lo, "hi": w.hi, "kind": KIND,
                                             "gh": settings.fleet_alert_gpu_hours * clear,
                                             "nj": settings.fleet_alert_jobs * clear}).fetchall()
        open_ = {r[0]: int(r[1]) for r in conn.execute(
            "SELECT job, id FROM alerts WHERE kind = %s AND state = 'firing'", (KIND,)).fetchall()}
        for component, gpu_h, jobs in rows:
            over = gpu_h >= settings.fleet_alert_gpu_hours or jobs >= settings.fleet_alert_jobs
            under = gpu_h < settings.fleet_alert_gpu_hours * clear and jobs < settings.fleet_alert_jobs * clear
            if over and component not in open_:
                fired += _fire(conn, component, w, now, settings)
            elif under and component in open_:
                resolved += _resolve(conn, open_[component], component, w, now, settings)
            elif component in open_:
                conn.execute("UPDATE alerts SET summary = %s, updated_at = now() WHERE id = %s",
                             (Jsonb(_body(conn, component, w, settings)), open_[component]))
        if settings.fleet_digest_hour is not None:
            digests = digest(conn, settings=settings, now=now)
    return {"fired": fired, "resolved": resolved, "digests": digests}


def _fire(conn: psycopg.Connection, component: str, w: Window, now: datetime, settings: Settings) -> int:
    body = _body(conn, component, w, settings)
    row = conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, detected_at, lost_s, summary)
           VALUES (%s, %s, 'firing', coalesce(%s::timestamptz, %s), %s, %s, %s)
           ON CONFLICT (job, kind) WHERE state = 'firing' DO NOTHING RETURNING id""",
        (component, KIND, body["first_seen"], now, now, body["gpu_hours_lost"] * 3600.0, Jsonb(body))).fetchone()
    if row is None:
        return 0
    alert = store.get_alert(conn, int(row[0]))
    assert alert is not None
    queued = store.enqueue(conn, alert, status="firing", event=KIND)
    log.warning("alert %s firing: component %s lost %.1f GPU-hours over %d jobs (%d notifications queued)",
                alert["id"], component, body["gpu_hours_lost"], body["jobs_affected"], queued)
    return 1


def _resolve(conn: psycopg.Connection, alert_id: int, component: str, w: Window, now: datetime,
             settings: Settings) -> int:
    conn.execute("UPDATE alerts SET state = 'resolved', resolved_at = %s, summary = %s, updated_at = now() "
                 "WHERE id = %s", (now, Jsonb(_body(conn, component, w, settings)), alert_id))
    alert = store.get_alert(conn, alert_id)
    assert alert is not None
    store.enqueue(conn, alert, status="resolved", event=KIND)
    log.info("alert %s resolved: component %s back under the fleet bars", alert_id, component)
    return 1


def digest(conn: psycopg.Connection, *, settings: Settings, now: datetime) -> int:
    """Queue the day's digest of the top components (the trailing window) once per UTC day, at or
    after `fleet_digest_hour`; returns 1 when queued."""
    n = now.astimezone(UTC)
    if settings.fleet_digest_hour is None or n.hour < settings.fleet_digest_hour:
        return 0
    if not conn.execute("INSERT INTO fleet_digest_sent (day) VALUES (%s) ON CONFLICT DO NOTHING RETURNING day",
                        (n.date(),)).fetchone():
        return 0
    w = _window(n, settings.fleet_alert_window_days)
    top = ranking(conn, by="component", window=w, layer=None, kind=None, limit=settings.fleet_digest_top)
    summary = {"window": {"from": w.lo.isoformat(), "to": w.hi.isoformat()},
               "components": [{"component": r["component"], "layer": r["layer"], "gpu_hours_lost": r["gpu_hours"],
                               "jobs_affected": r["jobs"], "evidence": (r["top_evidence"] or {}).get("evidence")}
                              for r in top]}
    row = conn.execute("""INSERT INTO alerts (job, kind, state, started_at, detected_at, resolved_at, summary)
                          VALUES (%s, %s, 'resolved', %s, %s, %s, %s) RETURNING id""",
                       (DIGEST_SUBJECT, DIGEST, now, now, now, Jsonb(summary))).fetchone()
    assert row is not None
    alert = store.get_alert(conn, int(row[0]))
    assert alert is not None
    store.enqueue(conn, alert, status="digest", event=DIGEST)
    return 1
