"""Webhook bodies (generic JSON, Slack, PagerDuty Events v2) and their signature. Pure functions.

A body is rendered once, when the notification is queued, and stored: every retry sends the very
same bytes, so the signature and the Idempotency-Key stay valid across attempts and restarts. The
one exception is PagerDuty's routing key, a credential: it is stored empty and filled in at send
time (`with_routing_key`, deterministic, so retries still carry identical bytes).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

BUSBW_KIND = "busbw_below_acceptance"  # #19: service/alerts/busbw.py
FLEET_KIND = "component_degraded"  # #48: service/fleet/alerts.py (the alert's `job` is the component)
DIGEST_KIND = "fleet_digest"  # #48: the optional daily digest of the top components
FLEET_KINDS = (FLEET_KIND, DIGEST_KIND)
HANG_KIND = "job_hang"  # #45 item 4: service/hang/alert.py
# an alert's kind is the event its notifications carry
EVENTS = ("step_regression", BUSBW_KIND, FLEET_KIND, DIGEST_KIND, HANG_KIND)
SIGNATURE_HEADER = "X-Fabricscope-Signature"


def sign(secret: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of the exact body>` (receivers: compare with hmac.compare_digest)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def idempotency_key(alert_id: int, status: str, n: int) -> str:
    # one key per alert transition: n tells apart a reopened alert's new firing notice (its `reopened`)
    # and an open job_hang alert's successive updates (its summary's `revision`)
    return f"fabricscope-alert-{alert_id}-{status}-{n}"


def _pct(alert: dict[str, Any]) -> str:
    r = alert.get("regression")
    return f"{r * 100:+.1f}%" if isinstance(r, float) else "?"


def _busbw_headline(alert: dict[str, Any], status: str) -> str:
    eff = alert.get("efficiency") or {}
    frac, thr = eff.get("fraction"), eff.get("threshold")
    level = f"{frac:.2f}" if isinstance(frac, float) else "?"
    where = f"fabric {eff.get('fabric')}"
    if status == "resolved":
        return (f"[resolved] job {alert['job']}: bus bandwidth back at {level} of the acceptance baseline ({where}) "
                f"at step {alert.get('resolved_step')}; {alert['steps']} steps were below {thr}")
    return (f"[firing] job {alert['job']}: bus bandwidth at {level} of the acceptance baseline ({where}), below "
            f"{thr} for {alert['steps']} steps since step {alert['since_step']}")


def _fleet_headline(alert: dict[str, Any], status: str) -> str:
    f = alert.get("fleet") or {}
    if alert.get("kind") == DIGEST_KIND:
        top = "; ".join(f"{c['component'] or c['layer']} {c['gpu_hours_lost']:.1f} GPU-h"
                        for c in (f.get("components") or [])[:3])
        return f"fleet digest: top components by GPU-hours lost: {top or 'none'}"
    gh = f.get("gpu_hours_lost")
    lost = f"{gh:.1f}" if isinstance(gh, int | float) else "?"
    what = (f"component {alert['job']} ({f.get('layer')}): {lost} GPU-hours lost over {f.get('jobs_affected')} "
            f"jobs; evidence: {f.get('evidence') or 'none recorded'}")
    return f"[{status}] {what}"


def _hang_suspect(s: dict[str, Any]) -> str:
    where = f"rank {s['rank']} ({s.get('host') or '?'}) {s['state']}"
    if s.get("group") is None:  # named by NCCL RAS only
        return f"{where} (NCCL RAS, communicator {s.get('ras_comm') or '?'})"
    also = f", NCCL RAS {s['ras_state']}" if s.get("ras_state") else ""
    return f"{where} {s['op']} group {s['group']} seq {s['seq']}{also}"


def _hang_headline(alert: dict[str, Any], status: str) -> str:
    if status == "resolved":
        return f"[resolved] job {alert['job']}: steps arriving again"
    hang = alert.get("hang") or {}
    names = "; ".join(_hang_suspect(s) for s in hang.get("suspects") or []) or "suspects not known yet"
    # `updated`: the open alert's suspects changed (service/hang/alert.py); the headline is the new list
    now = "suspects now: " if status == "updated" else ""
    return f"[{status}] job {alert['job']}: hung, no step since {alert.get('started_at')}; {now}{names}"


def _headline(alert: dict[str, Any], status: str) -> str:
    if alert.get("kind") == BUSBW_KIND:
        return _busbw_headline(alert, status)
    if alert.get("kind") in FLEET_KINDS:
        return _fleet_headline(alert, status)
    if alert.get("kind") == HANG_KIND:
        return _hang_headline(alert, status)
    job = alert["job"]
    if status == "resolved":
        return (f"[resolved] job {job}: step time back to baseline ({alert['baseline_s']:.3f}s) at step "
                f"{alert.get('resolved_step')}; {alert['lost_s']:.1f}s lost over {alert['steps']} steps")
    return (f"[firing] job {job}: step time regression {_pct(alert)} ({alert['baseline_s']:.3f}s -> "
            f"{alert['current_s']:.3f}s) since step {alert['since_step']}; {alert['lost_s']:.1f}s lost so far")


def _cause(alert: dict[str, Any]) -> str:
    if alert.get("kind") in FLEET_KINDS:
        return f"incidents: GET /v1/fleet/components/{alert['job']}"
    if alert.get("kind") == BUSBW_KIND:
        return f"per op and size: GET /v1/jobs/{alert['job']}/efficiency"
    if alert.get("kind") == HANG_KIND:
        return f"waiting ranks: {(alert.get('hang') or {}).get('waiting')}; GET /v1/jobs/{alert['job']}/hang"
    att = alert.get("attribution") or {}
    comps = att.get("components") or []
    if not att.get("available") or not comps:
        return "cause: not attributed yet"
    top = comps[0]
    return (f"likely cause: {top['layer']} {top.get('component') or ''} "
            f"({top['lost_s']:.1f}s of the attributed loss over {top['steps']} steps)").replace("  ", " ")


def generic(alert: dict[str, Any], *, status: str, key: str, now: datetime,
            routing_key: str | None = None) -> dict[str, Any]:
    return {"event": alert.get("kind") or "step_regression", "status": status, "idempotency_key": key,
            "created_at": now.isoformat(), "summary": _headline(alert, status), "alert": alert}


def slack(alert: dict[str, Any], *, status: str, key: str, now: datetime,
          routing_key: str | None = None) -> dict[str, Any]:
    text = _headline(alert, status)
    lines = [f"*{text}*"]
    if status in ("firing", "updated"):
        lines.append(_cause(alert))
    lines.append(f"alert #{alert['id']} · `GET /v1/alerts/{alert['id']}`")
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}]}


def _severity(alert: dict[str, Any]) -> str:
    if alert.get("kind") in FLEET_KINDS:
        return "warning"
    if alert.get("kind") == HANG_KIND:
        return "critical"  # the whole job makes no progress
    if alert.get("kind") == BUSBW_KIND:  # at half the threshold or less the fabric is badly degraded
        eff = alert.get("efficiency") or {}
        frac, thr = eff.get("fraction"), eff.get("threshold")
        return "error" if isinstance(frac, float) and isinstance(thr, float) and frac <= thr / 2 else "warning"
    return "error" if (alert.get("regression") or 0) >= 0.2 else "warning"


def pagerduty(alert: dict[str, Any], *, status: str, key: str, now: datetime,
              routing_key: str | None) -> dict[str, Any]:
    """PagerDuty Events API v2 (`POST https://events.pagerduty.com/v2/enqueue`)."""
    body: dict[str, Any] = {"routing_key": routing_key or "", "dedup_key": f"fabricscope-alert-{alert['id']}",
                            "event_action": "resolve" if status == "resolved" else "trigger"}
    if status == "resolved":
        return body
    comps = (alert.get("attribution") or {}).get("components") or []
    payload: dict[str, Any] = {
        "summary": (_headline(alert, status) + "; " + _cause(alert))[:1024],
        "source": alert["job"],
        "severity": _severity(alert),
        "timestamp": alert.get("detected_at") or now.isoformat(),
        "group": alert["job"],
        "class": alert.get("kind") or "step_regression",
        "custom_details": alert,
    }
    if alert.get("kind") == FLEET_KIND:
        payload["component"] = alert["job"]
    elif comps and comps[0].get("component"):
        payload["component"] = comps[0]["component"]
    body["payload"] = payload
    body["client"] = "fabricscope"
    return body


RENDERERS: dict[str, Callable[..., dict[str, Any]]] = {"generic": generic, "slack": slack, "pagerduty": pagerduty}
FORMATS = tuple(RENDERERS)


def render(fmt: str, alert: dict[str, Any], *, status: str, key: str, routing_key: str | None = None,
           now: datetime | None = None) -> bytes:
    doc = RENDERERS[fmt](alert, status=status, key=key, now=now or datetime.now(UTC), routing_key=routing_key)
    return orjson.dumps(doc)


def with_routing_key(body: bytes, routing_key: str) -> bytes:
    """The stored PagerDuty body with its routing key filled in (key order kept)."""
    doc = orjson.loads(body)
    doc["routing_key"] = routing_key
    return orjson.dumps(doc)
