"""Database access for alerts, webhooks and the delivery queue (psycopg 3, plain SQL).

Secrets (webhook `secret`, PagerDuty `routing_key`) are sealed here (service/alerts/secretbox.py)
and opened only by the delivery job; nothing in this module returns them, and no queued body
holds a routing key (it is filled in at send time).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

from fabricscope.service.alerts import payloads
from fabricscope.service.alerts.secretbox import SecretBox

_ALERT_COLS = ("id, job, kind, state, started_at, since_step, detected_at, detected_step, last_step, resolved_at, "
               "resolved_step, baseline_s, current_s, lost_s, steps, reopened, summary, updated_at")


def safe_url(url: str) -> str:
    """The URL without userinfo password (for API answers)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def url_host(url: str) -> str:
    """Just scheme://host[:port] (for logs: a Slack/Teams URL path is itself a credential)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


# -- alerts --------------------------------------------------------------------------------------------

def alert_out(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("id", "job", "kind", "state", "started_at", "since_step", "detected_at",
                               "detected_step", "last_step", "resolved_at", "resolved_step", "baseline_s",
                               "current_s", "lost_s", "steps", "reopened", "updated_at")}
    b, c = row["baseline_s"], row["current_s"]
    out["regression"] = (c / b - 1.0) if b and c is not None else None
    if row["kind"] == payloads.BUSBW_KIND:  # #19: its summary is the bus bandwidth, not an attribution
        out["attribution"] = {"available": False}
        out["efficiency"] = row["summary"] or {}
    elif row["kind"] in payloads.FLEET_KINDS:  # #48: its summary is the fleet ledger's, the job is the component
        out["attribution"] = {"available": False}
        out["fleet"] = row["summary"] or {}
    elif row["kind"] == payloads.HANG_KIND:  # #45: the hang answer (suspects, waiting ranks)
        out["attribution"] = {"available": False}
        out["hang"] = row["summary"] or {}
    else:
        out["attribution"] = row["summary"] or {"available": False}
    return out


def list_alerts(conn: psycopg.Connection, *, job: str | None, state: str | None, limit: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            f"SELECT {_ALERT_COLS} FROM alerts WHERE (%(job)s::text IS NULL OR job = %(job)s) "
            "AND (%(state)s::text IS NULL OR state = %(state)s) ORDER BY started_at DESC, id DESC LIMIT %(limit)s",
            {"job": job, "state": state, "limit": limit}).fetchall()
    return [alert_out(r) for r in rows]


def get_alert(conn: psycopg.Connection, alert_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT {_ALERT_COLS} FROM alerts WHERE id = %s", (alert_id,)).fetchone()
    return None if row is None else alert_out(row)


def attribution_summary(conn: psycopg.Connection, *, job: str, first: int, last: int | None) -> dict[str, Any]:
    """Top layers/components by time lost over the regression's steps, from stored attributions.
    `available: false` when the correlation engine has not attributed any of these steps (yet)."""
    rows = conn.execute(
        """SELECT layer, component, count(*) FILTER (WHERE slow), coalesce(sum(lost_s) FILTER (WHERE slow), 0),
                  count(*)
           FROM attributions WHERE job = %s AND step >= %s AND (%s::bigint IS NULL OR step <= %s)
           GROUP BY layer, component""", (job, first, last, last)).fetchall()
    attributed = sum(int(r[4]) for r in rows)
    slow = [(r[0], r[1], int(r[2]), float(r[3])) for r in rows if r[2] and r[0] != "none"]
    if not slow:
        return {"available": False, "attributed_steps": attributed, "slow_steps": 0, "layers": [], "components": []}
    total = sum(max(lost, 0.0) for *_, lost in slow) or 1.0
    layers: dict[str, list[float]] = {}
    for layer, _, n, lost in slow:
        acc = layers.setdefault(layer, [0.0, 0.0])
        acc[0] += lost
        acc[1] += n
    top_layers = sorted(layers.items(), key=lambda kv: -kv[1][0])[:3]
    top_comps = sorted(slow, key=lambda r: -r[3])[:5]
    return {
        "available": True, "attributed_steps": attributed, "slow_steps": sum(r[2] for r in slow),
        "layers": [{"layer": k, "lost_s": v[0], "steps": int(v[1]), "share": max(v[0], 0.0) / total}
                   for k, v in top_layers],
        "components": [{"layer": la, "component": c, "lost_s": lost, "steps": n} for la, c, n, lost in top_comps],
    }


# -- webhooks ------------------------------------------------------------------------------------------

def _webhook_out(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "url": safe_url(row["url"]), "format": row["format"],
            "events": list(row["events"]), "active": row["active"], "created_at": row["created_at"],
            "has_secret": bool(row["has_secret"]), "has_routing_key": bool(row["has_routing_key"])}


_WEBHOOK_COLS = ("id, name, url, format, events, active, created_at, secret IS NOT NULL AS has_secret, "
                 "routing_key IS NOT NULL AS has_routing_key")


def create_webhook(conn: psycopg.Connection, *, url: str, secret: str | None, events: list[str], fmt: str,
                   name: str | None, routing_key: str | None, active: bool, box: SecretBox) -> dict[str, Any]:
    sealed = [None if v is None else box.seal(v) for v in (secret, routing_key)]
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            f"INSERT INTO webhooks (url, secret, events, format, name, routing_key, active) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {_WEBHOOK_COLS}",
            (url, sealed[0], events, fmt, name, sealed[1], active)).fetchone()
    assert row is not None
    return _webhook_out(row)


def list_webhooks(conn: psycopg.Connection) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return [_webhook_out(r) for r in cur.execute(f"SELECT {_WEBHOOK_COLS} FROM webhooks ORDER BY id")]


def get_webhook(conn: psycopg.Connection, webhook_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(f"SELECT {_WEBHOOK_COLS} FROM webhooks WHERE id = %s", (webhook_id,)).fetchone()
    return None if row is None else _webhook_out(row)


def delete_webhook(conn: psycopg.Connection, webhook_id: int) -> bool:
    with conn.transaction():
        return conn.execute("DELETE FROM webhooks WHERE id = %s", (webhook_id,)).rowcount > 0


# -- the delivery queue --------------------------------------------------------------------------------

def enqueue(conn: psycopg.Connection, alert: dict[str, Any], *, status: str, event: str = "step_regression",
            delay_s: float = 0.0, now: datetime | None = None, transition: int | None = None) -> int:
    """Queue one notification per subscribed webhook; the (webhook, Idempotency-Key) pair is unique,
    so queueing the same transition twice adds nothing. `transition` numbers the alert's transitions
    of one status (default: `reopened`; an open alert's content updates count their own). Call inside
    the caller's transaction."""
    key = payloads.idempotency_key(alert["id"], status, alert["reopened"] if transition is None else transition)
    n = 0
    hooks = conn.execute("SELECT id, format FROM webhooks WHERE active AND %s = ANY(events) ORDER BY id",
                         (event,)).fetchall()
    for hook_id, fmt in hooks:
        body = payloads.render(fmt, alert, status=status, key=key, now=now)
        n += conn.execute(
            """INSERT INTO deliveries (webhook_id, alert_id, event, status, idempotency_key, body, next_attempt_at)
               VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))
               ON CONFLICT (webhook_id, idempotency_key) DO NOTHING""",
            (hook_id, alert["id"], event, status, key, body, delay_s)).rowcount
    return n


def list_deliveries(conn: psycopg.Connection, *, webhook_id: int, state: str | None,
                    limit: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            """SELECT id, alert_id, event, status, idempotency_key, state, attempts, created_at, next_attempt_at,
                      delivered_at, last_status, last_error
               FROM deliveries WHERE webhook_id = %(w)s AND (%(s)s::text IS NULL OR state = %(s)s)
               ORDER BY id DESC LIMIT %(n)s""", {"w": webhook_id, "s": state, "n": limit}).fetchall()
        ids = [r["id"] for r in rows]
        log: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
        for a in cur.execute("SELECT delivery_id, at, status, error, duration_s FROM delivery_attempts "
                             "WHERE delivery_id = ANY(%s) ORDER BY id", (ids,)):
            log[a.pop("delivery_id")].append(a)
    for r in rows:
        if r["state"] != "pending":
            r["next_attempt_at"] = None
        r["attempt_log"] = log[r["id"]]
    return rows
