"""Issue #18, webhooks: a trickling receiver is cut at the attempt deadline and delays no other one
(item 6); internal destinations are refused at registration and, after DNS rebinding, at connect
time (item 7); secrets are not readable in the database, signatures still verify, and key rotation
keeps old rows working (item 8a). Real PostgreSQL, service processes and sockets on 127.0.0.1; the
delivery job is called in-process (as the scheduler does) so that its timing can be measured."""

from __future__ import annotations

import hashlib
import hmac
import logging
import select
import socket
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest
from alembic import command
from alembic.config import Config
from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr

from fabricscope.service.alerts import delivery, secretbox, store
from fabricscope.service.db.database import MIGRATIONS_DIR
from fabricscope.service.settings import Settings
from tests.support import ServiceProcess, TestDatabase, start_service

K1, K2 = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def own_db(test_database: TestDatabase, tmp_path: Path) -> Iterator[str]:
    db = TestDatabase.create(test_database.admin_url, tmp_path / "pg")
    yield db.url
    db.drop()


@pytest.fixture
def conn(own_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(own_db) as c:
        yield c


@pytest.fixture
def own_service(own_db: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    svc = start_service(own_db, tmp_path, env=getattr(request, "param", {}))
    yield svc
    svc.stop()


def _settings(url: str, tmp_path: Path, **kw: Any) -> Settings:
    return Settings(**{"database_url": url, "data_dir": tmp_path / "data", "secret_keys": K1,
                       "webhook_allow_destinations": "127.0.0.1", **kw})


def _queue(conn: psycopg.Connection) -> int:
    """One firing alert of a job of its own, queued to every active webhook (as the engine does)."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO alerts (job, state, started_at, since_step, detected_at, detected_step, last_step, "
            "baseline_s, current_s, lost_s, steps) VALUES (%s, 'firing', now(), 100, now(), 120, 120, 1.0, 1.1, "
            "2.0, 20) RETURNING id", (f"job-{uuid.uuid4().hex[:8]}",)).fetchone()
        assert row is not None
        alert = store.get_alert(conn, row[0])
        assert alert is not None
        return store.enqueue(conn, alert, status="firing")


@dataclass
class Recorder:
    """An HTTP receiver answering 200 that records when each POST arrived."""

    got: list[tuple[float, dict[str, str], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                rec.got.append((time.monotonic(), {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.server.server_address[1]}/hook/s3cr3t-path"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _verifies(secret: str, headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("x-fabricscope-signature", ""), expected)


def _trickle(srv: socket.socket, interval: float, cut: list[float]) -> None:
    """Reads a request, then answers one byte per `interval` (never a complete response, 12 s at
    most); records how long the client stayed connected."""
    try:
        conn, _ = srv.accept()
    except OSError:  # the test ended first
        return
    t0 = time.monotonic()
    with conn:
        conn.recv(65536)
        for byte in (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 64)[: int(12 / interval)]:
            if select.select([conn], [], [], interval)[0] and not conn.recv(1024):
                break  # the client closed the connection
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
        cut.append(time.monotonic() - t0)


def test_trickling_receiver_is_cut_at_the_deadline_and_delays_no_other(
        conn: psycopg.Connection, own_db: str, tmp_path: Path) -> None:
    s = _settings(own_db, tmp_path, delivery_timeout_s=2.0)
    srv = socket.create_server(("127.0.0.1", 0))
    cut: list[float] = []
    threading.Thread(target=_trickle, args=(srv, 0.5, cut), daemon=True).start()
    good = Recorder()
    box = secretbox.box_for(s.secret_keys, s.data_dir)
    try:
        # the trickling one first: the old sequential loop sent to it first and waited it out
        slow = store.create_webhook(conn, url=f"http://127.0.0.1:{srv.getsockname()[1]}/in", secret=None,
                                    events=["step_regression"], fmt="generic", name="slow", routing_key=None,
                                    active=True, box=box)
        store.create_webhook(conn, url=good.url(), secret=None, events=["step_regression"], fmt="generic",
                             name="good", routing_key=None, active=True, box=box)
        assert _queue(conn) == 2
        t0 = time.monotonic()
        out = delivery.deliver_due(conn, settings=s)
        took = time.monotonic() - t0
        assert out["attempted"] == 2 and out["delivered"] == 1 and out["retrying"] == 1, out
        assert len(good.got) == 1 and good.got[0][0] - t0 < 1.5, "the good receiver waited for the slow one"
        assert took < 4.5, f"a delivery run took {took:.1f}s with a 2 s attempt deadline"
        [d] = store.list_deliveries(conn, webhook_id=slow["id"], state=None, limit=5)
        [attempt] = d["attempt_log"]
        assert d["state"] == "pending" and "AttemptTimeout" in attempt["error"]  # retried later, with backoff
        assert 1.9 <= attempt["duration_s"] < 3.0, attempt
        deadline = time.monotonic() + 5
        while not cut and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cut and cut[0] < 3.5, f"the trickling connection stayed open {cut}s"
        conn.commit()
    finally:
        good.stop()
        srv.close()


INTERNAL = ["http://127.0.0.1:5432/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:8000/x",
            "http://2130706433/", "http://0x7f000001/", "http://127.1/", "http://metadata.google.internal/v1/",
            "http://localhost:8000/", "http://10.0.0.5/hook", "http://172.16.3.4/", "http://192.168.1.20/",
            "http://[fc00::1]/", "http://[fd00:ec2::254]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0:8000/", "http://100.100.100.200/"]


@pytest.mark.parametrize("url", INTERNAL)
def test_internal_destinations_are_refused_at_registration(api: httpx.Client, url: str) -> None:
    r = api.post("/v1/webhooks", json={"url": url + "s3cr3t-path", "secret": "s-internal"})
    assert r.status_code == 422, r.text
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "url"] and "FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS" in err["msg"], err
    assert "s3cr3t-path" not in r.text and "s-internal" not in r.text


def test_public_destinations_are_still_accepted(api: httpx.Client) -> None:
    for url in ("https://93.184.215.14/hook", "https://hooks.example.com/T0/B0/x", "http://[2606:4700::1]/h"):
        r = api.post("/v1/webhooks", json={"url": url})
        assert r.status_code == 201, r.text
        assert api.delete(f"/v1/webhooks/{r.json()['id']}").status_code == 204


def test_dns_rebinding_to_loopback_is_refused_at_connect_time(
        own_service: ServiceProcess, conn: psycopg.Connection, own_db: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()
    name = "rebind.fabricscope.test"  # reserved TLD: it resolves nowhere, so registration accepts it
    try:
        with httpx.Client(base_url=own_service.url, timeout=30) as api:
            r = api.post("/v1/webhooks", json={"url": rec.url(name), "secret": "s-rebind"})
            assert r.status_code == 201, r.text
        hook_id = r.json()["id"]

        async def rebinding(host: str, port: int) -> list[str]:
            return ["127.0.0.1"]  # what a rebinding DNS server answers at send time

        s = _settings(own_db, tmp_path, secret_keys=None, webhook_allow_destinations="")
        assert _queue(conn) == 1
        with caplog.at_level(logging.INFO, logger="fabricscope"):
            out = delivery.deliver_due(conn, settings=s, resolver=rebinding)
        assert out["failed"] == 1 and rec.got == []
        [d] = store.list_deliveries(conn, webhook_id=hook_id, state=None, limit=5)
        assert d["state"] == "failed" and d["attempts"] == 1, d  # refused, not retried
        assert f"{name} resolves to 127.0.0.1, a loopback address" in d["last_error"], d
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert f"http://{name}:" in logged and "refused" in logged
        assert "s3cr3t-path" not in logged and "s-rebind" not in logged
        # control: the allowlist admits that address, and the send goes where the resolver said,
        # signed with the secret the service sealed with its generated key file
        assert _queue(conn) == 1
        out = delivery.deliver_due(conn, settings=s.model_copy(update={"webhook_allow_destinations": "127.0.0.1"}),
                                   resolver=rebinding)
        assert out["delivered"] == 1 and len(rec.got) == 1
        _, headers, body = rec.got[0]
        assert headers["host"].startswith(name) and _verifies("s-rebind", headers, body)
        # no key configured: the service sealed the secret with a key it generated in its data dir,
        # readable by its user only (the delivery above opened it with that same file)
        row = conn.execute("SELECT secret FROM webhooks").fetchone()
        assert row is not None and row[0].startswith("fernet:")
        assert stat.S_IMODE((tmp_path / "data" / secretbox.KEY_FILE).stat().st_mode) == 0o600
        conn.commit()
    finally:
        rec.stop()


@pytest.mark.parametrize("own_service", [{"FABRICSCOPE_SECRET_KEYS": K1,
                                      "FABRICSCOPE_WEBHOOK_ALLOW_DESTINATIONS": "127.0.0.1"}], indirect=True)
def test_secrets_are_encrypted_at_rest_and_rotation_keeps_old_rows(
        own_service: ServiceProcess, conn: psycopg.Connection, own_db: str, tmp_path: Path) -> None:
    gen, pd, legacy = Recorder(), Recorder(), Recorder()
    secret, routing = "whsec-" + uuid.uuid4().hex, "R0UT-" + uuid.uuid4().hex
    try:
        with httpx.Client(base_url=own_service.url, timeout=30) as api:
            assert api.post("/v1/webhooks", json={"url": gen.url(), "secret": secret}).status_code == 201
            r = api.post("/v1/webhooks", json={"url": pd.url(), "format": "pagerduty", "routing_key": routing})
            assert r.status_code == 201, r.text
            stored = conn.execute("SELECT secret, routing_key FROM webhooks ORDER BY id").fetchall()
            assert stored[0][0].startswith("fernet:") and stored[1][1].startswith("fernet:")
            assert secret not in str(stored) and routing not in str(stored)
            # the allowlist admits what it lists, nothing more
            assert api.post("/v1/webhooks", json={"url": "http://10.0.0.5/"}).status_code == 422
        # a webhook written by the old code, its secret in plain text
        conn.execute("INSERT INTO webhooks (url, secret) VALUES (%s, 'legacy-plain')", (legacy.url(),))
        conn.commit()

        def round_of_deliveries(keys: str) -> None:
            n = len(gen.got)
            assert _queue(conn) == 3
            bodies = conn.execute("SELECT body FROM deliveries WHERE state = 'pending'").fetchall()
            assert bodies and all(routing.encode() not in bytes(b[0]) for b in bodies)
            out = delivery.deliver_due(conn, settings=_settings(own_db, tmp_path, secret_keys=keys))
            assert out["delivered"] == 3, out
            assert _verifies(secret, gen.got[n][1], gen.got[n][2])
            assert orjson.loads(pd.got[n][2])["routing_key"] == routing
            assert _verifies("legacy-plain", legacy.got[n][1], legacy.got[n][2])

        round_of_deliveries(K1)
        rotated = f"{K2},{K1}"  # the new key first; the old one still decrypts
        round_of_deliveries(rotated)
        assert secretbox.reencrypt(conn, secretbox.box_for(SecretStr(rotated), tmp_path)) == 3
        for value in conn.execute("SELECT coalesce(secret, routing_key) FROM webhooks").fetchall():
            token = value[0].removeprefix("fernet:").encode()
            Fernet(K2).decrypt(token)
            with pytest.raises(InvalidToken):
                Fernet(K1).decrypt(token)
        round_of_deliveries(K2)  # the old key retired
        conn.commit()
    finally:
        for rec in (gen, pd, legacy):
            rec.stop()
    assert secret not in own_service.log.read_text() and routing not in own_service.log.read_text()


def test_migration_blanks_routing_keys_in_queued_bodies(own_db: str, conn: psycopg.Connection) -> None:
    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", own_db)
    command.downgrade(cfg, "0002_alerts")
    with conn.transaction():  # what 0002-era code queued: the routing key inside the body
        hook = conn.execute("INSERT INTO webhooks (url, format, routing_key) VALUES "
                            "('https://events.pagerduty.com/v2/enqueue', 'pagerduty', 'R-old') RETURNING id").fetchone()
        assert hook is not None
        conn.execute("INSERT INTO deliveries (webhook_id, event, idempotency_key, body) VALUES (%s, 'step_regression',"
                     " 'k1', %s)", (hook[0], orjson.dumps({"routing_key": "R-old", "event_action": "trigger"})))
    command.upgrade(cfg, "head")
    row = conn.execute("SELECT body FROM deliveries").fetchone()
    assert row is not None and b"R-old" not in bytes(row[0])
    assert orjson.loads(bytes(row[0])) == {"routing_key": "", "event_action": "trigger"}
