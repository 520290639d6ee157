"""#18: what a busy pool, big or slow requests and cross-site posts do to a real `fabricscope serve`.

Every request goes to 127.0.0.1, in bounded amounts, and each test stops by itself. Raw sockets
where an HTTP client would hide the point: an answer before the body was sent, a half-sent request.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx
import psutil
import psycopg
import pytest

from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.core import wire
from fabricscope.core.transport import Batch
from tests.support import ServiceProcess, start_service

ADMIN, INGEST = "ex-admin-token", "ex-ingest-token"
AUTH = f"Authorization: Bearer {ADMIN}\r\n".encode()
LIMIT = 1 << 20  # FABRICSCOPE_MAX_BODY_BYTES of the guarded service
DEADLINE_S = 1.5  # its header and body timeouts
MAX_CONNECTIONS = 64
POOL_SIZE = 20  # FABRICSCOPE_POOL_SIZE's default, which the guarded service keeps


@pytest.fixture(scope="module")
def guarded(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """Tokens on, a 1 MiB body limit, 1.5 s to send headers and body, 64 connections; the pool at its defaults."""
    svc = start_service(database_url, tmp_path_factory.mktemp("guarded"), env={
        "FABRICSCOPE_TOKENS": f"{ADMIN}:admin;{INGEST}:ingest", "FABRICSCOPE_MAX_BODY_BYTES": str(LIMIT),
        "FABRICSCOPE_HTTP_HEADER_TIMEOUT_S": str(DEADLINE_S), "FABRICSCOPE_HTTP_BODY_TIMEOUT_S": str(DEADLINE_S),
        "FABRICSCOPE_HTTP_MAX_HEADER_BYTES": "16384", "FABRICSCOPE_HTTP_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        # Every request here comes from 127.0.0.1: one client, allowed the whole of the server (#46's
        # per-client shares are tests/robustness/test_fair_http.py's).
        "FABRICSCOPE_MAX_HEAVY_READS_PER_CLIENT": "4"})
    yield svc
    svc.stop()


def _connect(svc: ServiceProcess) -> socket.socket:
    u = urlsplit(svc.url)
    return socket.create_connection((u.hostname, u.port), timeout=5)


def _request_head(method: str, path: str, length: int, extra: bytes = b"") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n").encode() + extra + b"\r\n"


def _status_within(sock: socket.socket, timeout_s: float) -> int | None:
    """The status of the answer if it starts within ``timeout_s``; None when none came."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(4096)
    except TimeoutError:
        return None
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def _closed_after(sock: socket.socket, drip: bytes, every_s: float, give_up_s: float) -> tuple[float | None, bytes]:
    """Send ``drip`` a byte at a time until the server closes; seconds until then (None: still open)."""
    t0, got = time.monotonic(), b""
    for i in range(len(drip)):
        if time.monotonic() - t0 > give_up_s:
            break
        try:
            sock.send(drip[i:i + 1])
        except OSError:
            return time.monotonic() - t0, got
        while select.select([sock], [], [], every_s)[0]:
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                return time.monotonic() - t0, got
            got += data
    return None, got


def _backends_waiting_on_locks(database_url: str, *, at_least: int, within_s: float) -> bool:
    """Whether ``at_least`` sessions of this database come to wait on a lock within ``within_s``."""
    deadline = time.monotonic() + within_s
    with psycopg.connect(database_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND wait_event_type = 'Lock'").fetchone()
            if row and row[0] >= at_least:
                return True
            time.sleep(0.05)
    return False


def _body_routes(svc: ServiceProcess) -> list[tuple[str, str]]:
    """Every operation of the served OpenAPI document that takes a request body, paths filled in."""
    spec = httpx.get(f"{svc.url}/openapi.json").json()
    return [(method.upper(), path.replace("{job}", "ex-job"))
            for path, ops in spec["paths"].items() for method, op in ops.items() if "requestBody" in op]


def test_busy_pool_is_429_with_retry_after_not_503(guarded: ServiceProcess, database_url: str) -> None:
    # 40 concurrent job registrations while their table is locked for longer than a request waits for a
    # connection (FABRICSCOPE_DB_TIMEOUT_S=2): every connection is busy, none is broken. Writes, since
    # the reads are admitted (#46) and so never take the whole pool.
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with psycopg.connect(database_url) as lock:
        lock.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        with ThreadPoolExecutor(40) as pool:
            futures = [pool.submit(httpx.put, f"{guarded.url}/v1/jobs/busy-{i}", headers=headers, timeout=30,
                                   json={"ranks": [{"rank": 0, "host": "h"}]}) for i in range(40)]
            # Probe only once every pooled connection waits on the lock: a fixed pause raced the
            # requests' arrival on a loaded machine, and the probe then found a free connection.
            assert _backends_waiting_on_locks(database_url, at_least=POOL_SIZE, within_s=10)
            # A readiness probe during the load must not pull a busy instance out of its load balancer.
            during = httpx.get(f"{guarded.url}/readyz", timeout=10)
            time.sleep(1.0)
            lock.commit()
            answers = [f.result() for f in futures]
    codes = sorted(r.status_code for r in answers)
    assert 503 not in codes and set(codes) <= {200, 429}, codes
    assert codes.count(200) >= POOL_SIZE, codes
    assert all(int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code == 429)
    assert all("busy" in r.json()["detail"] for r in answers if r.status_code == 429)
    assert during.status_code == 200 and during.json() == {**during.json(), "status": "ready", "database": "busy"}
    assert httpx.get(f"{guarded.url}/readyz").json()["status"] == "ready"
    busy = [line for line in httpx.get(f"{guarded.url}/metrics").text.splitlines()
            if line.startswith('fabricscope_busy_rejected_total{reason="pool"}')]
    assert busy and float(busy[0].split()[-1]) == codes.count(429)


def test_expensive_reads_cannot_starve_ingest(guarded: ServiceProcess, database_url: str) -> None:
    # 30 job reports blocked on their table (as a slow report of a long job would be) while the
    # feeds keep posting: the reports take at most FABRICSCOPE_MAX_HEAVY_READS (4) connections, the
    # rest of them wait FABRICSCOPE_DB_TIMEOUT_S and get 429; every ingest batch is stored at once.
    admin, ingest = ({"Authorization": f"Bearer {t}"} for t in (ADMIN, INGEST))
    job = f"heavy-{uuid.uuid4().hex[:6]}"
    assert httpx.put(f"{guarded.url}/v1/jobs/{job}", json={"ranks": [{"rank": 0, "host": "h"}]},
                     headers=ingest).status_code == 200

    def post(i: int) -> tuple[int, float]:
        t0 = time.monotonic()
        r = httpx.post(f"{guarded.url}/v1/ingest/samples", headers=ingest, timeout=30, json={"samples": [
            {"ts": time.time() - 1, "source": f"{job}:e{i}", "metric": "m", "value": i}]})
        return r.status_code, time.monotonic() - t0

    with psycopg.connect(database_url) as lock:
        lock.execute("LOCK TABLE steps IN ACCESS EXCLUSIVE MODE")
        with ThreadPoolExecutor(50) as pool:
            reports = [pool.submit(httpx.get, f"{guarded.url}/v1/jobs/{job}/report", headers=admin, timeout=30)
                       for _ in range(30)]
            time.sleep(0.5)
            posts = [pool.submit(post, i) for i in range(20)]
            posted = [f.result() for f in posts]
            time.sleep(2.5)
            lock.commit()
            codes = sorted(f.result().status_code for f in reports)
    assert [code for code, _ in posted] == [200] * 20, posted
    assert max(took for _, took in posted) < 2.0, posted  # never queued behind the reports
    assert set(codes) <= {200, 429} and codes.count(200) >= 4, codes
    assert codes.count(429) >= 20, codes
    busy = [line for line in httpx.get(f"{guarded.url}/metrics").text.splitlines()
            if line.startswith('fabricscope_busy_rejected_total{reason="heavy"}')]
    assert busy and float(busy[0].split()[-1]) >= codes.count(429)


def test_too_many_connections_is_429_not_503(guarded: ServiceProcess) -> None:
    # Connections at work (a request begun), not idle ones: idle ones are closed to make room (#46).
    # They have DEADLINE_S from their start to finish their headers: on a loaded machine the first may
    # be gone before the last is open, so up to three tries, and never a 503.
    codes = []
    for _ in range(3):
        busy = []
        try:
            for _ in range(MAX_CONNECTIONS):
                busy.append(_connect(guarded))
                busy[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            r = httpx.get(f"{guarded.url}/healthz", timeout=5)
        finally:
            for sock in busy:
                sock.close()
        codes.append(r.status_code)
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 1, r.text
            break
    assert codes[-1] == 429 and 503 not in codes, codes
    deadline = time.monotonic() + 5  # closed connections count out again
    while httpx.get(f"{guarded.url}/healthz").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_body_without_token_is_refused_before_it_is_read(guarded: ServiceProcess) -> None:
    head = _request_head("PUT", "/v1/topology", 150 << 20)
    with _connect(guarded) as sock:
        sock.sendall(head)  # the headers only: an answer now means the body was not waited for
        assert _status_within(sock, 5) == 401
    # Four at once, each pushing up to 16 MiB of its 150: the server's memory stays where it was.
    proc = psutil.Process(guarded.proc.pid)
    before = proc.memory_info().rss
    statuses: list[int | None] = []

    def push() -> None:
        with _connect(guarded) as sock:
            sock.sendall(head)
            chunk, sent = b" " * (256 << 10), 0
            sock.settimeout(2)
            try:
                while sent < 16 << 20:
                    sent += sock.send(chunk)
            except OSError:
                pass  # refused and closed: the server stopped reading
            statuses.append(_status_within(sock, 5))

    threads = [threading.Thread(target=push) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    grown = proc.memory_info().rss - before
    assert statuses == [401] * 4
    assert grown < 24 << 20, f"server grew by {grown >> 20} MiB"


def test_declared_body_over_the_limit_is_413_at_once_on_every_route(guarded: ServiceProcess) -> None:
    routes = _body_routes(guarded)
    assert ("PUT", "/v1/topology") in routes and ("POST", "/v1/ingest/samples") in routes and len(routes) >= 8
    for method, path in routes:
        with _connect(guarded) as sock:
            sock.sendall(_request_head(method, path, LIMIT + 1, AUTH))
            assert _status_within(sock, 3) == 413, (method, path)
    # Sent, not declared (chunked), and gzip that inflates past the limit: 413 as well.
    r = httpx.put(f"{guarded.url}/v1/topology", content=iter([b"[" + b" " * LIMIT + b"]"]),
                  headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"][0]["loc"] == ["body"]
    import gzip

    bomb = gzip.compress(b'{"devices": [' + b" " * (8 * LIMIT) + b"]}")
    r = httpx.put(f"{guarded.url}/v1/topology", content=bomb, headers={
        "Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 413 and "decompressed" in r.json()["detail"][0]["msg"]


def test_slow_headers_are_cut_off(guarded: ServiceProcess) -> None:
    request = b"GET /v1/topology HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    with _connect(guarded) as sock:  # a byte every 0.2 s would take 45 s to finish
        closed, got = _closed_after(sock, request, 0.2, give_up_s=8)
    assert closed is not None and closed < DEADLINE_S + 1.5, closed
    assert got.startswith(b"HTTP/1.1 408")
    with _connect(guarded) as sock:  # a connection that never sends anything
        closed, _ = _closed_after(sock, b"\0", 8, give_up_s=0)
        assert select.select([sock], [], [], DEADLINE_S + 1.5)[0] and sock.recv(1) == b""
    with _connect(guarded) as sock:  # headers over FABRICSCOPE_HTTP_MAX_HEADER_BYTES, fast
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40_000)
        assert _status_within(sock, 3) == 431


def test_slow_body_is_408(guarded: ServiceProcess) -> None:
    body = b'{"samples": []}' + b" " * 185
    with _connect(guarded) as sock:
        sock.sendall(_request_head("POST", "/v1/ingest/samples", len(body), AUTH) + body[:10])
        closed, got = _closed_after(sock, body[10:], 0.2, give_up_s=8)
    assert closed is not None and closed < DEADLINE_S + 1.5, closed
    assert got.startswith(b"HTTP/1.1 408") and b"FABRICSCOPE_HTTP_BODY_TIMEOUT_S" in got


def test_ingest_needs_a_json_content_type(api: httpx.Client, db_conn: psycopg.Connection) -> None:
    src = f"ct{uuid.uuid4().hex[:6]}:e1"
    body = f'{{"samples": [{{"ts": {time.time() - 1}, "source": "{src}", "metric": "m", "value": 1}}]}}'
    # What a cross-site form or fetch() can send without a preflight, on a service with no tokens:
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        r = api.post("/v1/ingest/samples", content=body, headers=headers)
        assert r.status_code == 415, (content_type, r.text)
        assert r.json()["detail"][0]["loc"] == ["header", "content-type"]
    assert db_conn.execute("SELECT count(*) FROM sample_view WHERE source = %s", (src,)).fetchone() == (0,)
    # What our own senders send (gzipped ingest, a plain job registration) is still taken.
    transport = HttpTransport(str(api.base_url))
    samples = wire.batch_body("samples", [{"ts": time.time() - 1, "source": src, "metric": "m", "value": 1}],
                              batch_id=f"ct-{src}")
    assert transport.send(Batch("samples", None, f"ct-{src}", samples, wire.dumps(samples))).kind == "ok"
    job = {"ranks": [{"rank": 0, "host": "n1"}]}
    assert transport.send(Batch("job", f"ct-{src}", "", job, wire.dumps(job))).kind == "ok"
    assert db_conn.execute("SELECT count(*) FROM sample_view WHERE source = %s", (src,)).fetchone() == (1,)
