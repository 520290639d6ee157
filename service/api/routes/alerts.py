"""GET /v1/alerts (read scope) and /v1/webhooks CRUD + delivery log (admin scope).

Webhook secrets and PagerDuty routing keys are write-only: accepted on POST, stored encrypted, used
to sign or address deliveries, never returned (`has_secret`/`has_routing_key` say whether one is set).
A URL whose host is internal (loopback, link-local, private, metadata) is refused with 422 unless
`FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS` admits it (service/alerts/destinations.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from fabricscope.core.errors import ConfigError
from fabricscope.service.alerts import destinations, payloads, store
from fabricscope.service.alerts.secretbox import box_for
from fabricscope.service.api.deps import (
    AdminAuth,
    CheapRead,
    ConnDep,
    ReadAuth,
    SettingsDep,
    answered,
    by_limit,
    by_size,
)

router = APIRouter(tags=["alerts"])

Format = Literal["generic", "slack", "pagerduty"]


class AttributionSummary(BaseModel):
    available: bool
    attributed_steps: int = 0
    slow_steps: int = 0
    layers: list[dict[str, Any]] = []
    components: list[dict[str, Any]] = []


class AlertOut(BaseModel):
    id: int
    job: str
    kind: str = Field(description="step_regression | busbw_below_acceptance | component_degraded | fleet_digest "
                                  "| job_hang (the fleet kinds' `job` is the component, or `fleet` for the digest)")
    state: Literal["firing", "resolved"]
    started_at: datetime = Field(description="start of the first regressed step (since when)")
    since_step: int | None = Field(description="first regressed step")
    detected_at: datetime | None = Field(description="when the alert fired")
    detected_step: int | None
    last_step: int | None = Field(description="last step judged for this alert")
    resolved_at: datetime | None
    resolved_step: int | None
    baseline_s: float | None = Field(description="step time before the regression (robust median)")
    current_s: float | None = Field(description="median step time of the recent regressed steps")
    regression: float | None = Field(description="current_s / baseline_s - 1 (0.05 = 5% slower)")
    lost_s: float | None = Field(description="time lost vs baseline since the regression began")
    steps: int = Field(description="steps in the regression so far")
    reopened: int = Field(description="times it relapsed within the cooldown and was reopened")
    attribution: AttributionSummary = Field(description="top layers/components by time lost (correlation engine)")
    efficiency: dict[str, Any] | None = Field(
        default=None, description="busbw_below_acceptance only: fabric, fraction (median of the last steps), "
                                  "min_fraction, threshold, steps_required")
    fleet: dict[str, Any] | None = Field(
        default=None, description="component_degraded: component, layer, kind, gpu_hours_lost, jobs_affected, jobs, "
                                  "evidence, window, thresholds; fleet_digest: window, components")
    hang: dict[str, Any] | None = Field(
        default=None, description="job_hang only: GET /v1/jobs/{job}/hang's answer (suspects, waiting, threshold_s), "
                                  "kept current while firing; revision: times its suspects changed since the firing "
                                  "(each change is notified with status `updated`)")
    updated_at: datetime


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2048, description="http(s) URL the notifications are POSTed to")
    secret: SecretStr | None = Field(default=None, min_length=1, max_length=1024,
                                     description="HMAC-SHA256 key for X-Fabricscope-Signature (write-only)")
    events: list[str] = Field(default_factory=lambda: ["step_regression"], min_length=1)
    format: Format = "generic"
    name: str | None = Field(default=None, max_length=200)
    routing_key: SecretStr | None = Field(default=None, min_length=1, max_length=256,
                                          description="PagerDuty Events v2 integration key (write-only)")
    active: bool = True

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            u = httpx.URL(v)
        except (httpx.InvalidURL, TypeError) as exc:
            raise ValueError("not a valid URL") from exc
        if u.scheme not in ("http", "https") or not u.host:
            raise ValueError("must be an http:// or https:// URL with a host")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        bad = [e for e in v if e not in payloads.EVENTS]
        if bad:
            raise ValueError(f"unknown event {bad[0]!r}; known: {', '.join(payloads.EVENTS)}")
        return sorted(set(v))


class WebhookOut(BaseModel):
    id: int
    name: str | None
    url: str
    format: Format
    events: list[str]
    active: bool
    created_at: datetime
    has_secret: bool
    has_routing_key: bool


class AttemptOut(BaseModel):
    at: datetime
    status: int | None
    error: str | None
    duration_s: float | None


class DeliveryOut(BaseModel):
    id: int
    alert_id: int | None
    event: str
    status: str | None = Field(description="the alert transition notified: firing | resolved | updated (job_hang: "
                                           "its suspects changed) | digest")
    idempotency_key: str
    state: Literal["pending", "delivered", "failed", "cancelled"]
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_status: int | None
    last_error: str | None
    attempt_log: list[AttemptOut]


@router.get("/v1/alerts", dependencies=[ReadAuth, by_limit(100, 1000)], response_model=list[AlertOut],
            summary="Alerts (step-time regression, bus bandwidth below acceptance), newest first")
def list_alerts(
    conn: ConnDep,
    job: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    state: Annotated[Literal["firing", "resolved"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    return store.list_alerts(conn, job=job, state=state, limit=limit)


@router.get("/v1/alerts/{alert_id}", dependencies=[ReadAuth, CheapRead], response_model=AlertOut, summary="One alert")
def get_alert(conn: ConnDep, alert_id: int = Path(ge=1, lt=2**63)) -> Any:
    out = store.get_alert(conn, alert_id)
    if out is None:
        raise HTTPException(404, detail=f"alert {alert_id} does not exist")
    return out


@router.post("/v1/webhooks", dependencies=[AdminAuth], response_model=WebhookOut, status_code=201,
             summary="Register a webhook (secret and routing key are write-only)")
def create_webhook(body: WebhookIn, conn: ConnDep, settings: SettingsDep) -> Any:
    if body.format == "pagerduty" and body.routing_key is None:
        raise HTTPException(422, detail=[{"loc": ["body", "routing_key"], "type": "missing",
                                          "msg": "format 'pagerduty' needs the integration key in routing_key"}])
    url = httpx.URL(body.url)
    policy = destinations.parse_allowlist(settings.webhook_allow_destinations)
    refusal = destinations.registration_refusal(url.host, url.port or (443 if url.scheme == "https" else 80), policy)
    if refusal is not None:
        raise HTTPException(422, detail=[{"loc": ["body", "url"], "type": "value_error", "msg": (
            f"internal destination refused: {refusal}; webhooks may target only public addresses unless "
            f"{destinations.SETTING} admits it")}])
    try:
        box = box_for(settings.secret_keys, settings.data_dir)
    except ConfigError as exc:  # no key to encrypt with: storing the secret in clear is not an option
        raise HTTPException(503, detail=str(exc)) from exc
    return store.create_webhook(
        conn, url=body.url, secret=body.secret.get_secret_value() if body.secret else None, events=body.events,
        fmt=body.format, name=body.name, active=body.active,
        routing_key=body.routing_key.get_secret_value() if body.routing_key else None, box=box)


@router.get("/v1/webhooks", dependencies=[AdminAuth, by_size("webhooks")], response_model=list[WebhookOut],
            summary="List webhooks")
def list_webhooks(request: Request, conn: ConnDep) -> Any:
    out = store.list_webhooks(conn)
    answered(request, len(out))
    return out


@router.get("/v1/webhooks/{webhook_id}", dependencies=[AdminAuth, CheapRead], response_model=WebhookOut,
            summary="One webhook")
def get_webhook(conn: ConnDep, webhook_id: int = Path(ge=1, lt=2**63)) -> Any:
    out = store.get_webhook(conn, webhook_id)
    if out is None:
        raise HTTPException(404, detail=f"webhook {webhook_id} does not exist")
    return out


@router.delete("/v1/webhooks/{webhook_id}", dependencies=[AdminAuth], status_code=204,
               summary="Delete a webhook and its queued deliveries")
def delete_webhook(conn: ConnDep, webhook_id: int = Path(ge=1, lt=2**63)) -> Response:
    if not store.delete_webhook(conn, webhook_id):
        raise HTTPException(404, detail=f"webhook {webhook_id} does not exist")
    return Response(status_code=204)


@router.get("/v1/webhooks/{webhook_id}/deliveries", dependencies=[AdminAuth, by_limit(100, 1000)],
            response_model=list[DeliveryOut],
            summary="Delivery log of a webhook, newest first, with every attempt")
def deliveries(
    conn: ConnDep,
    webhook_id: int = Path(ge=1, lt=2**63),
    state: Annotated[Literal["pending", "delivered", "failed", "cancelled"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    if store.get_webhook(conn, webhook_id) is None:
        raise HTTPException(404, detail=f"webhook {webhook_id} does not exist")
    return store.list_deliveries(conn, webhook_id=webhook_id, state=state, limit=limit)
