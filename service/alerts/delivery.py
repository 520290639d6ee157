"""Webhook delivery from the persistent queue (table `deliveries`). Called periodically by
service/workers.py as `deliver_due(conn, settings=...)`, never from a request handler.

* Claim, then send, then record: a due row is claimed in a short transaction (attempts + 1 and
  `next_attempt_at` pushed past the attempt deadline as a lease, SKIP LOCKED so replicas never send
  the same row at once) and committed before any network I/O; no lock or transaction is held while
  a receiver is slow. A process that dies mid-send leaves the lease to expire and the row is
  sent again later with the same body and Idempotency-Key (at-least-once; receivers dedupe).
* One slow receiver delays no other: up to `delivery_concurrency` webhooks are sent to at once
  (one delivery per webhook at a time, so each receiver gets its notifications in order), and
  every attempt has a total deadline, `delivery_timeout_s`, over connect, send and the answer: a
  receiver trickling its answer a byte at a time is cut there (httpx's timeouts are per read).
* Bounded work per run: at most `delivery_batch` attempts and `delivery_budget_s` seconds (plus
  the attempts in flight); a webhook that fails once in a run is skipped for the rest of that run.
* Destinations are checked on every connect (service/alerts/transport.py); a refused one is failed,
  not retried. Secrets are opened here, just before signing (service/alerts/secretbox.py).
* 2xx = delivered. 4xx other than 408/409/425/429 = the receiver rejects it: failed, no retry.
  Anything else (5xx, timeouts, refused, garbage) = retry with exponential backoff
  (`delivery_backoff_s` · 2^(attempt-1), jittered, capped; a Retry-After is honoured up to the
  cap) until `delivery_max_age_s`, then failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx
import psycopg

from fabricscope.core.backoff import backoff_delay
from fabricscope.service.alerts import payloads, transport
from fabricscope.service.alerts.destinations import DestinationRefused, parse_allowlist
from fabricscope.service.alerts.secretbox import SecretBox, SecretUnreadable, box_for
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


@dataclass
class Claimed:
    did: int
    hook_id: int
    event: str
    key: str
    body: bytes
    attempts: int
    age: float
    url: str | None  # None: the webhook was deleted meanwhile
    secret: str | None  # as stored (sealed)
    routing_key: str | None  # as stored (sealed)
    fmt: str


@dataclass
class Outcome:
    status: int | None
    error: str | None
    duration: float
    retry_after: float | None = None
    refused: bool = False


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


async def send(client: httpx.AsyncClient, *, url: str, secret: str | None, body: bytes, key: str, event: str,
               delivery_id: int) -> httpx.Response:
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Idempotency-Key": key,
               "X-Fabricscope-Event": event, "X-Fabricscope-Delivery": str(delivery_id)}
    if secret:
        headers[payloads.SIGNATURE_HEADER] = payloads.sign(secret, body)
    # stream and never read the body: a receiver answering with an endless or garbage body costs nothing
    async with client.stream("POST", url, content=body, headers=headers) as resp:
        return resp


def deliver_due(conn: psycopg.Connection, *, settings: Settings,
                resolver: transport.Resolver | None = None) -> dict[str, int]:
    """Send what is due; returns counts {attempted, delivered, retrying, failed, expired}.
    `resolver`: host, port -> addresses (default: the system's); the policy checks what it answers."""
    out = {"attempted": 0, "delivered": 0, "retrying": 0, "failed": 0, "expired": 0}
    with conn.transaction():
        out["expired"] = conn.execute(
            """UPDATE deliveries SET state = 'failed', last_error = 'gave up: older than the maximum age'
               WHERE state = 'pending' AND created_at < now() - make_interval(secs => %s)""",
            (settings.delivery_max_age_s,)).rowcount
    if out["expired"]:
        m.WEBHOOK_DELIVERIES.labels("expired").inc(out["expired"])
    asyncio.run(_run(conn, settings, resolver, out))
    return out


def _claim(conn: psycopg.Connection, settings: Settings, exclude: list[int]) -> Claimed | None:
    with conn.transaction():
        row = conn.execute(_CLAIM, {"lease": settings.delivery_timeout_s + 30, "skip": exclude}).fetchone()
        if row is None:
            return None
        hook = conn.execute("SELECT url, secret, routing_key, format FROM webhooks WHERE id = %s",
                            (row[1],)).fetchone() or (None, None, None, "generic")
    return Claimed(row[0], row[1], row[2], row[3], bytes(row[4]), row[5], row[6], *hook)


async def _run(conn: psycopg.Connection, settings: Settings, resolver: transport.Resolver | None,
               out: dict[str, int]) -> None:
    policy = parse_allowlist(settings.webhook_allow_destinations)
    box = box_for(settings.secret_keys, settings.data_dir)
    stop_claiming = time.monotonic() + settings.delivery_budget_s
    skip: set[int] = set()
    flying: dict[asyncio.Task[Outcome], Claimed] = {}
    async with transport.client(policy, timeout_s=settings.delivery_timeout_s,
                                concurrency=settings.delivery_concurrency, resolver=resolver) as http:
        try:
            while True:
                while (len(flying) < settings.delivery_concurrency and out["attempted"] < settings.delivery_batch
                       and time.monotonic() < stop_claiming):
                    busy = [*skip, *(c.hook_id for c in flying.values())]
                    c = await asyncio.to_thread(_claim, conn, settings, busy)
                    if c is None:
                        break
                    out["attempted"] += 1
                    if c.url is not None:  # else the webhook was deleted (its rows go with it)
                        flying[asyncio.create_task(_attempt(http, c, box, settings.delivery_timeout_s))] = c
                if not flying:
                    return
                done, _ = await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    c = flying.pop(task)
                    state = await asyncio.to_thread(_record, conn, c, settings, task.result())
                    out[state] += 1
                    if state != "delivered":
                        skip.add(c.hook_id)
        finally:  # an error (the database gone): the claimed rows come back when their lease expires
            for task in flying:
                task.cancel()
            await asyncio.gather(*flying, return_exceptions=True)


async def _attempt(http: httpx.AsyncClient, c: Claimed, box: SecretBox, deadline_s: float) -> Outcome:
    assert c.url is not None
    t0 = time.monotonic()
    try:
        secret = None if c.secret is None else box.open(c.secret)
        body = c.body
        if c.fmt == "pagerduty" and c.routing_key is not None:
            body = payloads.with_routing_key(body, box.open(c.routing_key))
    except SecretUnreadable as exc:
        return Outcome(None, f"not sent: the webhook's secret or routing key is unreadable: {exc}", 0.0)
    try:
        async with asyncio.timeout(deadline_s):
            resp = await send(http, url=c.url, secret=secret, body=body, key=c.key, event=c.event,
                              delivery_id=c.did)
        return Outcome(resp.status_code, None, time.monotonic() - t0, _retry_after(resp))
    except TimeoutError:
        error = f"AttemptTimeout: no complete answer within {deadline_s:g}s (the deadline of one attempt)"
    except DestinationRefused as exc:
        return Outcome(None, f"destination refused: {exc}", time.monotonic() - t0, refused=True)
    except httpx.HTTPError as exc:
        error = _describe(exc, c.url)
    return Outcome(None, error, time.monotonic() - t0)


def _record(conn: psycopg.Connection, c: Claimed, settings: Settings, o: Outcome) -> str:
    status, error = o.status, o.error
    if status is not None and 200 <= status < 300:
        state, delay = "delivered", 0.0
    elif status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX:
        state, delay = "failed", 0.0
        error = f"HTTP {status}: rejected by the receiver, not retried"
    elif o.refused:
        state, delay = "failed", 0.0
        error = f"{error}; not retried (FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS admits internal destinations)"
    else:
        delay = backoff_s(c.attempts, settings, o.retry_after)
        state = "retrying" if c.age + delay < settings.delivery_max_age_s else "failed"
        error = error or f"HTTP {status}"
        if state == "failed":
            error += "; gave up: maximum age reached"
    with conn.transaction():
        conn.execute("INSERT INTO delivery_attempts (delivery_id, status, error, duration_s) VALUES (%s, %s, %s, %s)",
                     (c.did, status, error, o.duration))
        conn.execute(
            """UPDATE deliveries SET state = %s, last_status = %s, last_error = %s,
                      delivered_at = CASE WHEN %s = 'delivered' THEN now() END,
                      next_attempt_at = now() + make_interval(secs => %s) WHERE id = %s""",
            ("pending" if state == "retrying" else state, status, error, state, delay, c.did))
    m.observe_delivery(state, o.duration)
    host = url_host(c.url or "")
    if state == "delivered":
        log.info("delivery %s to webhook %s (%s) delivered (HTTP %s, attempt %s)", c.did, c.hook_id, host,
                 status, c.attempts)
    else:
        log.warning("delivery %s to webhook %s (%s) attempt %s: %s; %s", c.did, c.hook_id, host, c.attempts,
                    error, f"retry in {delay:.0f}s" if state == "retrying" else "given up")
    return state
