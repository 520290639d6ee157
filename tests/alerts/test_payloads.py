"""Webhook bodies and signatures (pure): the signature is HMAC-SHA256 of the exact bytes, every format
carries what its receiver needs (PagerDuty Events v2 fields, Slack text), secrets stay out."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import orjson
import pytest

from fabricscope.service.alerts import payloads

ALERT = {
    "id": 42, "job": "llama-70b-run3", "kind": "step_regression", "state": "firing",
    "started_at": datetime(2026, 11, 30, 10, 0, tzinfo=UTC), "since_step": 812, "detected_at": None,
    "detected_step": 832, "last_step": 840, "resolved_at": None, "resolved_step": None, "baseline_s": 1.0,
    "current_s": 1.06, "regression": 0.06, "lost_s": 1.7, "steps": 29, "reopened": 0,
    "attribution": {"available": True, "attributed_steps": 29, "slow_steps": 27,
                    "layers": [{"layer": "fabric", "lost_s": 1.5, "steps": 25, "share": 0.9}],
                    "components": [{"layer": "fabric", "component": "leaf1:Ethernet12", "lost_s": 1.5, "steps": 25}]},
    "updated_at": datetime(2026, 11, 30, 10, 1, tzinfo=UTC),
}


def test_signature_is_hmac_sha256_of_the_exact_body() -> None:
    body = payloads.render("generic", ALERT, status="firing", key="k1")
    sig = payloads.sign("topsecret", body)
    assert sig == "sha256=" + hmac.new(b"topsecret", body, hashlib.sha256).hexdigest()
    # RFC 4231 test case 2, so the construction is the standard one
    assert payloads.sign("Jefe", b"what do ya want for nothing?") == \
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert payloads.sign("topsecret", body + b" ") != sig


def test_idempotency_key_is_per_transition() -> None:
    keys = {payloads.idempotency_key(42, s, n) for s in ("firing", "resolved") for n in (0, 1)}
    assert len(keys) == 4


def test_generic_body() -> None:
    doc = orjson.loads(payloads.render("generic", ALERT, status="firing", key="k1"))
    assert doc["event"] == "step_regression" and doc["status"] == "firing" and doc["idempotency_key"] == "k1"
    assert doc["alert"]["since_step"] == 812 and doc["alert"]["baseline_s"] == 1.0
    assert doc["alert"]["attribution"]["components"][0]["component"] == "leaf1:Ethernet12"
    assert "+6.0%" in doc["summary"]


@pytest.mark.parametrize("status,action", [("firing", "trigger"), ("resolved", "resolve")])
def test_pagerduty_events_v2(status: str, action: str) -> None:
    doc = orjson.loads(payloads.render("pagerduty", ALERT, status=status, key="k", routing_key="R0UT1NG"))
    assert doc["routing_key"] == "R0UT1NG" and doc["event_action"] == action
    assert doc["dedup_key"] == "fabricscope-alert-42"  # same for trigger and resolve: PD pairs them
    if action == "trigger":
        p = doc["payload"]
        assert {"summary", "source", "severity"} <= set(p) and len(p["summary"]) <= 1024
        assert p["severity"] in {"critical", "error", "warning", "info"}
        assert p["component"] == "leaf1:Ethernet12" and "fabric" in p["summary"]


def test_slack_body_and_unattributed_alert() -> None:
    bare = {**ALERT, "attribution": {"available": False}}
    doc = orjson.loads(payloads.render("slack", bare, status="firing", key="k"))
    assert "llama-70b-run3" in doc["text"] and doc["blocks"][0]["type"] == "section"
    assert "not attributed yet" in doc["blocks"][0]["text"]["text"]
