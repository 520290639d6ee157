"""The alert engine and the delivery job called directly on a real database (no service process):
flap handling within the cooldown, the attribution summary, incomplete steps, 4xx handling."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest

from fabricscope.service.alerts import delivery, engine, secretbox, store
from fabricscope.service.settings import Settings
from tests.alerts.receiver import Receiver, free_port


@pytest.fixture
def conn(own_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(own_db) as c:  # not autocommit: as the service's pool hands it out
        yield c


TEST_KEY = "ZmFicmljc2NvcGUtdGVzdC1rZXktMzItYnl0ZXMhISE="  # 32 bytes, url-safe base64: a Fernet key


def _settings(url: str, **kw: object) -> Settings:
    # local receivers through the allowlist; a fixed key, so nothing is written to the user's data dir
    return Settings(**{"database_url": url, "alert_step_lag": 1, "delivery_backoff_s": 0.2,  # type: ignore[arg-type]
                       "webhook_allow_destinations": "127.0.0.1", "secret_keys": TEST_KEY, **kw})


def _box(s: Settings) -> secretbox.SecretBox:
    return secretbox.box_for(s.secret_keys, s.data_dir)


def _steps(conn: psycopg.Connection, job: str, first: int, durations: list[float], ranks: int = 2,
           skip_rank_last: bool = False) -> None:
    t = time.time() - 3600 + first
    with conn.transaction():
        conn.execute("INSERT INTO jobs (name) VALUES (%s) ON CONFLICT DO NOTHING", (job,))
        rows = []
        for i, d in enumerate(durations):
            for r in range(ranks):
                if skip_rank_last and i == len(durations) - 1 and r == ranks - 1:
                    continue
                rows.append((job, r, first + i, t, t + d, d))
            t += d
        with conn.cursor().copy("COPY steps (job, rank, step, start_ts, end_ts, duration_s) FROM STDIN") as cp:
            for row in rows:
                cp.write_row((row[0], row[1], row[2], time_fmt(row[3]), time_fmt(row[4]), row[5]))


def time_fmt(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1e6):06d}+00"


def _series(n: int, seed: int, factor: float = 1.0) -> list[float]:
    return list(1.0 * factor * np.random.default_rng(seed).lognormal(0, 0.01, n))


def test_relapse_within_cooldown_reopens_the_alert_without_a_new_page(conn: psycopg.Connection, own_db: str) -> None:
    s = _settings(own_db, alert_cooldown_s=60)
    store.create_webhook(conn, url="http://127.0.0.1:9/x", secret="k", events=["step_regression"], fmt="generic",
                         name=None, routing_key=None, active=True, box=_box(s))
    conn.commit()
    _steps(conn, "j", 0, _series(150, 1) + _series(40, 2, 1.1))
    assert engine.run_once(conn, settings=s)["fired"] == 1
    _steps(conn, "j", 190, _series(40, 3))  # recovers
    assert engine.run_once(conn, settings=s)["resolved"] == 1
    [a] = store.list_alerts(conn, job="j", state=None, limit=10)
    assert a["state"] == "resolved"
    held = conn.execute("SELECT state, next_attempt_at > now() + interval '50 s' FROM deliveries "
                        "WHERE status = 'resolved'").fetchall()
    assert held == [("pending", True)]  # the resolve notice waits out the cooldown
    _steps(conn, "j", 230, _series(40, 4, 1.1))  # relapse
    assert engine.run_once(conn, settings=s)["fired"] == 0
    [a] = store.list_alerts(conn, job="j", state=None, limit=10)
    assert a["state"] == "firing" and a["reopened"] == 1 and a["since_step"] <= 155
    assert a["steps"] > 60  # both episodes counted
    rows = conn.execute("SELECT status, state FROM deliveries ORDER BY id").fetchall()
    assert rows == [("firing", "pending"), ("resolved", "cancelled")]  # no second page, no stale resolve
    conn.commit()


def test_alert_carries_the_attribution_summary(conn: psycopg.Connection, own_db: str) -> None:
    s = _settings(own_db)
    _steps(conn, "k", 0, _series(150, 5) + _series(40, 6, 1.1))
    with conn.transaction():
        for step in range(150, 190):
            layer, comp = ("fabric", "leaf1:Ethernet12") if step % 4 else ("compute", "node07:gpu3")
            conn.execute("INSERT INTO attributions (job, step, slow, layer, component, lost_s) "
                         "VALUES ('k', %s, true, %s, %s, 0.1)", (step, layer, comp))
    engine.run_once(conn, settings=s)
    [a] = store.list_alerts(conn, job="k", state="firing", limit=10)
    att = a["attribution"]
    assert att["available"] is True and att["layers"][0]["layer"] == "fabric"
    assert att["components"][0] == {"layer": "fabric", "component": "leaf1:Ethernet12",
                                    "lost_s": pytest.approx(0.1 * att["components"][0]["steps"]),
                                    "steps": att["components"][0]["steps"]}
    assert att["layers"][0]["share"] == pytest.approx(0.75, abs=0.05)
    conn.commit()


def test_incomplete_newest_step_waits_for_its_ranks(conn: psycopg.Connection, own_db: str) -> None:
    s = _settings(own_db, alert_step_lag=3)
    _steps(conn, "m", 0, _series(50, 7), ranks=2, skip_rank_last=True)
    engine.run_once(conn, settings=s)
    assert conn.execute("SELECT last_step FROM alert_state WHERE job = 'm'").fetchone() == (48,)
    conn.commit()


def test_delivery_4xx_is_not_retried_and_500_is(conn: psycopg.Connection, own_db: str) -> None:
    s = _settings(own_db, delivery_timeout_s=2)
    bad = Receiver(free_port(), mode="500").start()
    try:
        h410 = store.create_webhook(conn, url="http://127.0.0.1:9/gone", secret=None, events=["step_regression"],
                                    fmt="generic", name=None, routing_key=None, active=True, box=_box(s))
        h500 = store.create_webhook(conn, url=bad.url, secret=None, events=["step_regression"], fmt="slack",
                                    name=None, routing_key=None, active=True, box=_box(s))
        conn.commit()
        _steps(conn, "n", 0, _series(150, 8) + _series(40, 9, 1.1))
        engine.run_once(conn, settings=s)
        # point the first webhook at a server answering 410 Gone
        class Gone(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.send_response(410)
                self.end_headers()

            def log_message(self, *a: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gone)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        with conn.transaction():
            conn.execute("UPDATE webhooks SET url = %s WHERE id = %s",
                         (f"http://127.0.0.1:{srv.server_address[1]}/gone", h410["id"]))
        out = delivery.deliver_due(conn, settings=s)
        assert out["attempted"] == 2 and out["failed"] == 1 and out["retrying"] == 1
        time.sleep(0.5)
        out = delivery.deliver_due(conn, settings=s)
        assert out["attempted"] == 1 and out["retrying"] == 1  # only the 500 one comes back
        d410 = store.list_deliveries(conn, webhook_id=h410["id"], state=None, limit=5)[0]
        assert d410["state"] == "failed" and d410["attempts"] == 1 and "not retried" in d410["last_error"]
        d500 = store.list_deliveries(conn, webhook_id=h500["id"], state=None, limit=5)[0]
        assert d500["state"] == "pending" and d500["attempts"] == 2 and len(bad.got) == 2
        assert "x-fabricscope-signature" not in bad.got[0].headers  # no secret, no signature
        srv.shutdown()
        srv.server_close()
        conn.commit()
    finally:
        bad.stop()
