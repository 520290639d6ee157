"""HTTP transport to the fabricscope ingest API (POST /v1/ingest/{kind}, PUT /v1/jobs/{job}).

Standard library only (urllib, http.client): the training hook uses it inside training processes.
Ingest bodies go gzipped; a job registration is small and goes plain (the JSON routes of the API
need not decode gzip). The token is sent as a bearer header and never shown by ``repr``.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from fabricscope.collectors.sinks.sender import Sender
from fabricscope.core import wire
from fabricscope.core.redact import redact_url
from fabricscope.core.transport import Batch, Outcome, http_outcome, named_items

log = logging.getLogger("fabricscope.sender")

_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class HttpTransport:
    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 5.0) -> None:
        self._url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        host = urllib.parse.urlsplit(self._url).hostname or ""
        # A loopback service is never behind the site's HTTP proxy (CI machines often set one).
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:  # never the token, never user:password
        return f"HttpTransport({redact_url(self._url)!r})"

    def send(self, batch: Batch) -> Outcome:
        if batch.kind == "job":
            path = f"/v1/jobs/{urllib.parse.quote(str(batch.job), safe='')}"
            return self.request("PUT", path, batch.text.encode(), gzipped=False)
        return self.request("POST", f"/v1/ingest/{batch.kind}", wire.gzip_body(batch.text.encode()), gzipped=True,
                            kind=batch.kind)

    def request(self, method: str, path: str, data: bytes, *, gzipped: bool, kind: str | None = None) -> Outcome:
        """One request to any route of the API (``data`` already gzipped when ``gzipped``); for a
        ``kind`` batch, a 422 that names bad items says which (``Outcome.items``)."""
        headers = {"Content-Type": "application/json"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self._url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                resp.read()
                return http_outcome(resp.status)
        except urllib.error.HTTPError as e:
            try:
                detail = e.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                detail = ""
            retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            items = _named_items(detail, kind) if kind is not None and e.code == 422 else ()
            return http_outcome(e.code, f"{method} {path}: HTTP {e.code}: {detail[:500]}", retry_after, items)
        except (OSError, ValueError, http.client.HTTPException) as e:
            log.debug("fabricscope: %s %s: %s", method, path, e)
            return http_outcome(None, f"{method} {path}: {type(e).__name__}")

    def get_json(self, path: str) -> Any:
        """``GET path`` of the API: the decoded JSON answer, or None on any failure (logged at debug)."""
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        req = urllib.request.Request(self._url + path, method="GET", headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError, http.client.HTTPException) as e:
            log.debug("fabricscope: GET %s: %s", path, e)
            return None

    def close(self) -> None:
        """Nothing held between requests."""


class HttpSender(Sender):
    """A :class:`Sender` over HTTP; what ``make_sink("http(s)://...")`` builds."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 5.0,
                 spool_path: str | Path | None = None, spool_max_bytes: int = 64 << 20,
                 queue_max: int = 100_000, batch_max: int = 5000, flush_interval_s: float = 1.0,
                 max_retries: int = 3) -> None:
        super().__init__(HttpTransport(url, token=token, timeout_s=timeout_s), spool_path=spool_path,
                         spool_max_bytes=spool_max_bytes, queue_max=queue_max, batch_max=batch_max,
                         flush_interval_s=flush_interval_s, max_retries=max_retries)


def _named_items(text: str, kind: str) -> tuple[int, ...]:
    try:
        doc = json.loads(text)
    except ValueError:
        return ()
    return named_items(doc.get("detail") if type(doc) is dict else None, kind)


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


__all__ = ["HttpSender", "HttpTransport", "redact_url"]
