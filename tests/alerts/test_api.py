"""/v1/webhooks and /v1/alerts against the session's real service: write-only secrets, field-named
422s, 404s, delete."""

from __future__ import annotations

import httpx
import pytest


def test_webhook_crud_keeps_secrets_write_only(api: httpx.Client) -> None:
    r = api.post("/v1/webhooks", json={"url": "https://user:pw@hooks.example.com/T0/B0/XyZ", "secret": "s-1234567",
                                       "format": "pagerduty", "routing_key": "R-abcdef", "name": "pd"})
    assert r.status_code == 201, r.text
    hook = r.json()
    assert hook["has_secret"] and hook["has_routing_key"] and hook["events"] == ["step_regression"]
    assert hook["url"] == "https://user:***@hooks.example.com/T0/B0/XyZ"
    for text in (r.text, api.get("/v1/webhooks").text, api.get(f"/v1/webhooks/{hook['id']}").text,
                 api.get("/openapi.json").text):
        assert "s-1234567" not in text and "R-abcdef" not in text and ":pw@" not in text
    assert api.get(f"/v1/webhooks/{hook['id']}/deliveries").json() == []
    assert api.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
    assert api.get(f"/v1/webhooks/{hook['id']}").status_code == 404
    assert api.delete(f"/v1/webhooks/{hook['id']}").status_code == 404
    assert api.get(f"/v1/webhooks/{hook['id']}/deliveries").status_code == 404


@pytest.mark.parametrize("body,field", [
    ({"url": "ftp://x/y"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"url": "http://x/", "events": ["disk_full"]}, "events"),
    ({"url": "http://x/", "events": []}, "events"),
    ({"url": "http://x/", "format": "teams"}, "format"),
    ({"url": "http://x/", "format": "pagerduty"}, "routing_key"),
    ({"url": "http://x/", "secret": ""}, "secret"),
    ({"url": "http://x/", "secrte": "typo"}, "secrte"),
    ({}, "url"),
])
def test_bad_webhooks_are_422_naming_the_field(api: httpx.Client, body: dict[str, object], field: str) -> None:
    r = api.post("/v1/webhooks", json=body)
    assert r.status_code == 422, r.text
    assert any(field in d["loc"] for d in r.json()["detail"]), r.text


def test_alert_queries(api: httpx.Client) -> None:
    assert api.get("/v1/alerts", params={"job": "no-such-job"}).json() == []
    assert api.get("/v1/alerts", params={"state": "exploded"}).status_code == 422
    assert api.get("/v1/alerts/999999999").status_code == 404
    assert api.get("/v1/alerts/0").status_code == 422
