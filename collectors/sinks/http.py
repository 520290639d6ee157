"""Background HTTP sender to the fabricscope ingest API, shared by the training hook and host agents.

Standard library only (urllib, threading, gzip, json): it runs inside training processes.

The caller's side is a bounded deque: ``submit`` appends and returns, it never blocks, never raises;
a full queue drops and counts. A daemon thread drains the queue every ``flush_interval_s`` (or as
soon as ``batch_max`` items wait), groups items per kind and job into batches with a fresh
``batch_id`` (the server ignores a batch id it has seen, so retries are idempotent), gzips and POSTs
them. Connection errors, 5xx, 408 and 429 are retried with exponential backoff (``Retry-After``
honoured); 413 splits the batch in two; any other 4xx is the data's fault, so the server's message is
logged and that batch dropped (counted). A batch whose retries ran out goes to the spool, and from
then on new batches go behind it (order is kept) until a replay of the oldest spooled batch
succeeds; the service is probed again with growing pauses, not hammered.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import weakref
from collections import deque
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from fabricscope.collectors.sinks.spool import Spool

log = logging.getLogger("fabricscope.sender")

KINDS = frozenset({"samples", "steps", "collectives", "events"})
_JOB_KINDS = frozenset({"steps", "collectives"})  # their body names the job once per batch
_RETRY_STATUS = frozenset({408, 429})
_MAX_PAUSE_S = 30.0
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

_live: weakref.WeakSet[HttpSender] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The sender thread does not survive fork (DataLoader workers): a child must neither queue
    # into a dead thread nor flush the parent's items twice.
    for s in list(_live):
        s._forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def redact_url(url: str) -> str:
    """The URL without user:password, for logs."""
    p = urllib.parse.urlsplit(url)
    if p.username or p.password:
        host = p.hostname or ""
        if p.port:
            host = f"{host}:{p.port}"
        return urllib.parse.urlunsplit((p.scheme, host, p.path, p.query, p.fragment))
    return url


class HttpSender:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        spool_path: str | Path | None = None,
        spool_max_bytes: int = 64 << 20,
        queue_max: int = 100_000,
        batch_max: int = 5000,
        flush_interval_s: float = 1.0,
        timeout_s: float = 5.0,
        max_retries: int = 3,
    ) -> None:
        self._url = url.rstrip("/")
        self._token = token
        self._queue_max = queue_max
        self._batch_max = max(1, batch_max)
        self._interval = flush_interval_s
        self._timeout = timeout_s
        self._max_retries = max(0, max_retries)
        self._q: deque[tuple[str, str | None, dict[str, Any]]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()  # interrupts backoff sleeps at close
        self._cv = threading.Condition()
        self._busy = False
        self._closing = False
        self._closed = False
        self._abandon = False  # close() timed out: spool what is left, send nothing more
        self._forked = False
        self._flush_req = 0
        self._flush_done = 0
        self._drop_lock = threading.Lock()
        self._down = False  # circuit open: new batches go to the spool behind the old ones
        self._next_probe = 0.0
        self._force = False
        self._probe_pause = 0.0
        self._stats = dict.fromkeys(
            ("sent", "dropped", "dropped_queue_full", "dropped_spool_full", "rejected",
             "spooled", "replayed", "retries", "failed_batches", "rejected_batches", "split_batches",
             "sent_batches", "spool_corrupt"),
            0,
        )
        host = urllib.parse.urlsplit(self._url).hostname or ""
        # A loopback service is never behind the site's HTTP proxy (CI machines often set one).
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)
        self._spool: Spool | None = None
        if spool_path is not None:
            try:
                self._spool = Spool(spool_path, spool_max_bytes)
            except OSError as e:
                log.warning("fabricscope: no spool (%s); batches that cannot be sent will be dropped", e)
        self._thread = threading.Thread(target=self._run, name="fabricscope-sender", daemon=True)
        self._thread.start()
        _live.add(self)

    def __repr__(self) -> str:  # never the token
        return f"HttpSender({redact_url(self._url)!r})"

    # -- caller side (any thread; cheap, never raises) ----------------------------------------------
    def submit(self, kind: str, item: dict[str, Any], *, job: str | None = None) -> bool:
        try:
            if self._closing or self._forked or kind not in KINDS or len(self._q) >= self._queue_max:
                self._count_drop("dropped_queue_full", 1)
                return False
            self._q.append((kind, job, item))
            if len(self._q) >= self._batch_max:
                self._wake.set()
            return True
        except Exception:  # pragma: no cover - defensive: nothing may reach the training loop
            return False

    def put_job(self, job: str, body: dict[str, Any]) -> None:
        try:
            if self._closing or self._forked or len(self._q) >= self._queue_max:
                self._count_drop("dropped_queue_full", 1)
                return
            self._q.append(("job", job, body))
        except Exception:  # pragma: no cover
            pass

    def _count_drop(self, why: str, n: int) -> None:
        with self._drop_lock:
            self._stats[why] += n
            self._stats["dropped"] += n

    @property
    def stats(self) -> dict[str, int]:
        out = dict(self._stats)
        out["queued"] = len(self._q)
        out["spool_bytes"] = self._spool.pending_bytes if self._spool else 0
        if self._spool:
            out["spool_corrupt"] = self._spool.corrupt
        return out

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send everything queued now (and replay the spool). True when all of it reached the
        service and the spool is empty; False on timeout or while the service is away."""
        if self._forked or not self._thread.is_alive():
            return False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            self._flush_req += 1
            target = self._flush_req
            self._wake.set()
            while True:
                if self._flush_done >= target and not self._q and not self._busy:
                    return not self._down and not (self._spool is not None and self._spool)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(0.05 if left is None else min(left, 0.05))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting items, send (or spool) what is queued, release the spool."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if not self._forked:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._abandon = True  # the service is slow: put the rest on disk and stop
                self._stop.set()
                self._wake.set()
                self._thread.join(max(1.0, self._timeout + 0.5))
        self._closed = True
        # A forked child shares the parent's flock: unlocking it here would free the parent's spool.
        if self._spool is not None and not self._forked and not self._thread.is_alive():
            with contextlib.suppress(OSError):
                self._spool.close()
        left = len(self._q)
        if left:
            self._count_drop("dropped_queue_full", left)
            log.warning("fabricscope: %d items not sent at close", left)

    # -- sender thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            closing = self._closing
            with self._cv:
                flush_target = self._flush_req
                self._busy = True
            try:
                # A flush or close tries the service now even while it is thought to be away.
                self._force = flush_target != self._flush_done or closing
                self._cycle()
            except Exception:  # pragma: no cover - the thread must outlive any bug
                log.exception("fabricscope sender: unexpected error")
            with self._cv:
                self._busy = False
                self._flush_done = flush_target
                self._cv.notify_all()
            if closing and not self._q:
                return

    def _cycle(self) -> None:
        self._replay()
        while self._q:
            items: list[tuple[str, str | None, dict[str, Any]]] = []
            while self._q and len(items) < self._batch_max:
                items.append(self._q.popleft())
            for rec in self._group(items):
                self._dispatch(rec)

    def _group(self, items: list[tuple[str, str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Batches in first-seen order, one per (kind, job); job registrations one each."""
        groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
        out: list[dict[str, Any]] = []
        for kind, job, item in items:
            if kind == "job":
                out.append({"kind": "job", "job": job, "body": item})
                continue
            lst = groups.get((kind, job))
            if lst is None:
                lst = groups[(kind, job)] = []
                out.append({"kind": kind, "job": job, "items": lst})
            lst.append(item)
        for rec in out:
            rec["batch_id"] = uuid.uuid4().hex
        return out

    def _dispatch(self, rec: dict[str, Any]) -> None:
        if self._abandon or (self._spool is not None and self._spool):
            self._to_spool(rec)  # behind what is already spooled, so order is kept
        elif self._down and not self._force and time.monotonic() < self._next_probe:
            self._to_spool(rec)
        elif self._deliver(rec, retries=0 if self._down else None) == "failed":
            self._open_circuit()
            self._to_spool(rec)
        else:
            self._close_circuit()

    def _replay(self) -> None:
        if self._spool is None or not self._spool or self._abandon:
            return
        if self._down and not self._force and time.monotonic() < self._next_probe:
            return
        while (rec := self._spool.peek()) is not None:
            result = self._deliver(rec, retries=0 if self._down else None)
            if result == "failed":
                self._open_circuit()
                return
            n = _n_items(rec)
            self._spool.pop()
            if result == "ok":
                self._stats["replayed"] += n
            self._close_circuit()

    def _open_circuit(self) -> None:
        self._force = False  # one forced probe per flush is enough
        if not self._down:
            log.warning("fabricscope: service %s unreachable; spooling", redact_url(self._url))
        self._down = True
        self._probe_pause = min(_MAX_PAUSE_S, max(self._interval, self._probe_pause * 2 or 1.0))
        self._next_probe = time.monotonic() + self._probe_pause

    def _close_circuit(self) -> None:
        if self._down:
            log.warning("fabricscope: service %s is back", redact_url(self._url))
        self._down = False
        self._probe_pause = 0.0

    def _to_spool(self, rec: dict[str, Any]) -> None:
        n = _n_items(rec)
        if self._spool is not None:
            try:
                if self._spool.append(rec):
                    self._stats["spooled"] += n
                    return
                self._count_drop("dropped_spool_full", n)
                return
            except (OSError, ValueError) as e:
                log.warning("fabricscope: spool write failed: %s", e)
        self._count_drop("dropped_spool_full", n)

    # -- one batch over HTTP ------------------------------------------------------------------------
    def _deliver(self, rec: dict[str, Any], retries: int | None = None) -> str:
        """'ok', 'rejected' (4xx, dropped and counted) or 'failed' (retries ran out)."""
        method, path, body = _request_of(rec)
        try:
            text = _dumps_yielding(body, rec["kind"])
        except ValueError:  # NaN/inf somewhere: drop just the items that are not JSON
            if "items" not in rec:
                self._count_drop("rejected", 1)
                log.warning("fabricscope: %s %s: body is not JSON, dropped", method, path)
                return "rejected"
            good = [it for it in rec["items"] if _json_ok(it)]
            self._count_drop("rejected", len(rec["items"]) - len(good))
            log.warning("fabricscope: %s: %d items with NaN/inf dropped", path, len(rec["items"]) - len(good))
            rec["items"][:] = good
            if not good:
                return "rejected"
            method, path, body = _request_of(rec)
            text = _dumps(body)
        # Ingest bodies are gzipped; a job registration is small and goes plain (the JSON
        # routes of the API need not decode gzip).
        data = gzip.compress(text.encode(), compresslevel=5) if method == "POST" else text.encode()
        max_retries = self._max_retries if retries is None else retries
        attempt = 0
        while True:
            status, retry_after, detail = self._http(method, path, data, gzipped=method == "POST")
            if status is not None and 200 <= status < 300:
                self._stats["sent"] += _n_items(rec)
                self._stats["sent_batches"] += 1
                return "ok"
            if status == 413 and rec.get("items") and len(rec["items"]) > 1:
                self._stats["split_batches"] += 1
                half = len(rec["items"]) // 2
                parts = [dict(rec, items=rec["items"][:half], batch_id=f"{rec['batch_id']}.0"),
                         dict(rec, items=rec["items"][half:], batch_id=f"{rec['batch_id']}.1")]
                results = [self._deliver(p, retries) for p in parts]
                return "failed" if "failed" in results else "ok"
            if status is not None and 400 <= status < 500 and status not in _RETRY_STATUS:
                n = _n_items(rec)
                self._stats["rejected_batches"] += 1
                self._count_drop("rejected", n)
                log.warning("fabricscope: %s %s rejected (%d, %d items dropped): %s",
                            method, path, status, n, detail[:500])
                return "rejected"
            if attempt >= max_retries:
                self._stats["failed_batches"] += 1
                return "failed"
            pause = retry_after if retry_after is not None else min(_MAX_PAUSE_S, 0.25 * 2**attempt)
            attempt += 1
            self._stats["retries"] += 1
            if self._stop.wait(min(pause, _MAX_PAUSE_S)):
                self._stats["failed_batches"] += 1
                return "failed"

    def _http(self, method: str, path: str, data: bytes, gzipped: bool) -> tuple[int | None, float | None, str]:
        headers = {"Content-Type": "application/json"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self._url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self._timeout) as resp:
                resp.read()
                return resp.status, None, ""
        except urllib.error.HTTPError as e:
            try:
                detail = e.read().decode("utf-8", "replace")
            except Exception:
                detail = ""
            return e.code, _retry_after(e.headers.get("Retry-After") if e.headers else None), detail
        except (OSError, ValueError, http.client.HTTPException) as e:
            log.debug("fabricscope: %s %s: %s", method, path, e)
            return None, None, str(e)


def _request_of(rec: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    kind, job = rec["kind"], rec.get("job")
    if kind == "job":
        return "PUT", f"/v1/jobs/{urllib.parse.quote(str(job), safe='')}", rec["body"]
    body: dict[str, Any] = {"batch_id": rec["batch_id"]}
    if job is not None and kind in _JOB_KINDS:
        body["job"] = job
    elif job is not None and kind == "events":
        for ev in rec["items"]:
            ev.setdefault("job", job)
    body[kind] = rec["items"]
    return "POST", f"/v1/ingest/{kind}", body


def _dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"), default=_jsonable, allow_nan=False)


_CHUNK = 256


def _dumps_yielding(body: dict[str, Any], key: str) -> str:
    """``_dumps(body)``, but the item list is encoded a chunk at a time with the GIL let go in
    between: one json.dumps of 5000 items holds it for milliseconds, and a training thread coming
    back from a collective would wait that long for it."""
    items = body.get(key)
    if not isinstance(items, list) or len(items) <= _CHUNK:
        return _dumps(body)
    parts = []
    for i in range(0, len(items), _CHUNK):
        parts.append(_dumps(items[i:i + _CHUNK])[1:-1])
        time.sleep(0)
    head = _dumps({k: v for k, v in body.items() if k != key})[:-1]
    return f"{head}{',' if len(head) > 1 else ''}{json.dumps(key)}:[{','.join(parts)}]}}"


def _json_ok(item: Any) -> bool:
    try:
        _dumps(item)
        return True
    except ValueError:
        return False


def _jsonable(o: Any) -> Any:
    """numpy/torch scalars and other number-likes become numbers, anything else its str()."""
    try:
        return float(o)
    except (TypeError, ValueError):
        return str(o)


def _n_items(rec: dict[str, Any]) -> int:
    return len(rec["items"]) if "items" in rec else 1


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


__all__ = ["KINDS", "HttpSender", "redact_url"]
