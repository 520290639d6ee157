"""Webhook delivery from the persistent queue (table `deliveries`). Called periodically by
service/workers.py as `deliver_due(conn, settings=...)`, never from a request handler.

* Claim, then send, then record: a due row is claimed in a short transaction (attempts + 1 and
  `next_attempt_at` pushed past the HTTP timeout as a lease, SKIP LOCKED so replicas never send the
  same row at once) and committed before any network I/O; no lock or transaction is held while
  a receiver is slow. A process that dies mid-send leaves the lease to expire and the row is
  sent again later with the same body and Idempotency-Key (at-least-once; receivers dedupe).
* Bounded work per run: at most `delivery_batch` attempts and `delivery_budget_s` seconds; a
  webhook that fails once in a run is skipped for the rest of that run, so one dead receiver
  cannot use up the run for the others.
* 2xx = delivered. 4xx other than 408/409/425/429 = the receiver rejects it: failed, no retry.
  Anything else (5xx, timeouts, refused, garbage) = retry with exponential backoff
  (`delivery_backoff_s` · 2^(attempt-1), jittered, capped; a Retry-After is honoured up to the
  cap) until `delivery_max_age_s`, then failed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import psycopg

from fabricscope.core.backoff import backoff_delay
from fabricscope.service.alerts import payloads
from fabricscope.service.alerts.store import url_host
from fabricscope.service.observability import metrics as m
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts.delivery")
# httpx logs every request with its full URL at INFO; a webhook URL's path is often a credential
# (Slack, Teams), so its request log is kept quiet and this module logs scheme://host only.
logging.getLogger("httpx").setLevel(logging.WARNING)

RETRYABLE_4XX = frozenset({408, 409, 425, 429})
USER_AGENT = "fabricscope-webhooks/1"

_CLAIM = """
UPDATE deliveries d SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => %(lease)s)
WHERE d.id = (SELECT id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= now()
                AND NOT (webhook_id = ANY(%(skip)s))
              ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING d.id, d.webhook_id, d.event, d.idempotency_key, d.body, d.attempts,
          extract(epoch FROM now() - d.created_at)::float8
"""


def backoff_s(attempts: int, settings: Settings, retry_after: float | None = None) -> float:
    # Never longer than the configured cap: the jitter only shortens.
    delay = backoff_delay(max(attempts, 1), base=settings.delivery_backoff_s, cap=settings.delivery_backoff_max_s,
                          spread=(0.8, 1.0))
    if retry_after is not None:
        delay = max(delay, min(retry_after, settings.delivery_backoff_max_s))
    return delay


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _describe(exc: Exception, url: str) -> str:
    """An error text without the URL (its path may be a credential) and without the secret."""
    text = str(exc).replace(url, url_host(url)) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def send(client: httpx.Client, *, url: str, secret: str | None, body: bytes, key: str, event: str,
         delivery_id: int) -> httpx.Response:
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Idempotency-Key": key,
               "X-Fabricscope-Event": event, "X-Fabricscope-Delivery": str(delivery_id)}
    if secret:
        headers[payloads.SIGNATURE_HEADER] = payloads.sign(secret, body)
    # stream and never read the body: a receiver answering with an endless or garbage body costs nothing
    with client.stream("POST", url, content=body, headers=headers) as resp:
        return resp


def deliver_due(conn: psycopg.Connection, *, settings: Settings, client: httpx.Client | None = None) -> dict[str, int]:
    """Send what is due; returns counts {attempted, delivered, retrying, failed, expired}."""
    out = {"attempted": 0, "delivered": 0, "retrying": 0, "failed": 0, "expired": 0}
    with conn.transaction():
        out["expired"] = conn.execute(
            """UPDATE deliveries SET state = 'failed', last_error = 'gave up: older than the maximum age'
               WHERE state = 'pending' AND created_at < now() - make_interval(secs => %s)""",
            (settings.delivery_max_age_s,)).rowcount
    if out["expired"]:
        m.WEBHOOK_DELIVERIES.labels("expired").inc(out["expired"])
    timeout = httpx.Timeout(settings.delivery_timeout_s, connect=min(settings.delivery_timeout_s, 3.0))
    own = client is None
    http = client or httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False)
    deadline = time.monotonic() + settings.delivery_budget_s
    skip: list[int] = []
    try:
        while out["attempted"] < settings.delivery_batch and time.monotonic() < deadline:
            with conn.transaction():
                row = conn.execute(_CLAIM, {"lease": settings.delivery_timeout_s + 30, "skip": skip}).fetchone()
                hook = None if row is None else conn.execute(
                    "SELECT url, secret FROM webhooks WHERE id = %s", (row[1],)).fetchone()
            if row is None:
                break
            did, hook_id, event, key, body, attempts, age = row
            out["attempted"] += 1
            if hook is None:  # webhook deleted meanwhile (the row goes with it); nothing to send
                continue
            result = _attempt(http, did=did, url=hook[0], secret=hook[1], body=bytes(body), key=key, event=event)
            state = _record(conn, did=did, hook_id=hook_id, url=hook[0], attempts=attempts, age=age,
                            settings=settings, **result)
            out[state] += 1
            if state != "delivered":
                skip.append(hook_id)
    finally:
        if own:
            http.close()
    return out


def _attempt(http: httpx.Client, *, did: int, url: str, secret: str | None, body: bytes, key: str,
             event: str) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        resp = send(http, url=url, secret=secret, body=body, key=key, event=event, delivery_id=did)
        return {"status": resp.status_code, "error": None, "retry_after": _retry_after(resp),
                "duration": time.monotonic() - t0}
    except httpx.HTTPError as exc:
        return {"status": None, "error": _describe(exc, url), "retry_after": None, "duration": time.monotonic() - t0}


def _record(conn: psycopg.Connection, *, did: int, hook_id: int, url: str, attempts: int, age: float,
            settings: Settings, status: int | None, error: str | None, retry_after: float | None,
            duration: float) -> str:
    if status is not None and 200 <= status < 300:
        state, delay = "delivered", 0.0
    elif status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX:
        state, delay = "failed", 0.0
        error = f"HTTP {status}: rejected by the receiver, not retried"
    else:
        delay = backoff_s(attempts, settings, retry_after)
        state = "retrying" if age + delay < settings.delivery_max_age_s else "failed"
        error = error or f"HTTP {status}"
        if state == "failed":
            error += "; gave up: maximum age reached"
    with conn.transaction():
        conn.execute("INSERT INTO delivery_attempts (delivery_id, status, error, duration_s) VALUES (%s, %s, %s, %s)",
                     (did, status, error, duration))
        conn.execute(
            """UPDATE deliveries SET state = %s, last_status = %s, last_error = %s,
                      delivered_at = CASE WHEN %s = 'delivered' THEN now() END,
                      next_attempt_at = now() + make_interval(secs => %s) WHERE id = %s""",
            ("pending" if state == "retrying" else state, status, error, state, delay, did))
    m.observe_delivery(state, duration)
    if state == "delivered":
        log.info("delivery %s to webhook %s (%s) delivered (HTTP %s, attempt %s)", did, hook_id, url_host(url),
                 status, attempts)
    else:
        log.warning("delivery %s to webhook %s (%s) attempt %s: %s; %s", did, hook_id, url_host(url), attempts,
                    error, f"retry in {delay:.0f}s" if state == "retrying" else "given up")
    return state
