"""The ingest batch on the wire: ``{"batch_id": ..., "<kind>": [...]}`` (docs/API.md, POST /v1/ingest/{kind}).

One definition shared by every publisher (the HTTP and NATS transports of the collectors) and the
server's bus codec, so the body a collector sends and the body the server reads cannot drift.
Encoding is strict JSON (NaN/inf are refused, as the server would) with numpy/torch scalars
turned into numbers; big bodies are gzipped. Standard library only: the training hook uses it.
"""

from __future__ import annotations

import gzip
import json
import time
from typing import Any

KINDS = frozenset({"samples", "steps", "collectives", "events", "collective_summaries"})
JOB_KINDS = frozenset({"steps", "collectives", "collective_summaries"})  # their body names the job once per batch
SUBJECT_PREFIX = "fabricscope.ingest"  # the bus subject of a kind is "<prefix>.<kind>"
MSG_ID = "Nats-Msg-Id"  # the bus header carrying the batch id (JetStream de-duplicates on it)
GZIP_OVER = 4096  # bodies smaller than this are not worth the CPU of gzip on the bus
_CHUNK = 256


def batch_body(kind: str, items: list[dict[str, Any]], *, batch_id: str, job: str | None = None) -> dict[str, Any]:
    """The docs/API.md body of one batch. Steps and collectives name their job once; events each."""
    body: dict[str, Any] = {"batch_id": batch_id}
    if job is not None and kind in JOB_KINDS:
        body["job"] = job
    elif job is not None and kind == "events":
        for ev in items:
            ev.setdefault("job", job)
    body[kind] = items
    return body


def dumps(body: Any) -> str:
    """Compact strict JSON; ValueError on NaN/inf."""
    return json.dumps(body, separators=(",", ":"), default=_jsonable, allow_nan=False)


def dumps_yielding(body: dict[str, Any], key: str) -> str:
    """``dumps(body)``, but the list under ``key`` is encoded a chunk at a time with the GIL let go in
    between: one json.dumps of 5000 items holds it for milliseconds, and a training thread coming
    back from a collective would wait that long for it."""
    items = body.get(key)
    if not isinstance(items, list) or len(items) <= _CHUNK:
        return dumps(body)
    parts = []
    for i in range(0, len(items), _CHUNK):
        parts.append(dumps(items[i:i + _CHUNK])[1:-1])
        time.sleep(0)
    head = dumps({k: v for k, v in body.items() if k != key})[:-1]
    return f"{head}{',' if len(head) > 1 else ''}{json.dumps(key)}:[{','.join(parts)}]}}"


def json_ok(item: Any) -> bool:
    """Whether ``item`` encodes as strict JSON (no NaN/inf anywhere in it)."""
    try:
        dumps(item)
        return True
    except ValueError:
        return False


def gzip_body(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=5)


def gzip_if_large(data: bytes) -> tuple[bytes, bool]:
    """(payload, gzipped) for a bus message: small bodies go plain."""
    if len(data) > GZIP_OVER:
        return gzip.compress(data, compresslevel=1), True
    return data, False


def _jsonable(o: Any) -> Any:
    """numpy/torch scalars and other number-likes become numbers, anything else its str()."""
    try:
        return float(o)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a number-like past a double
        return str(o)


__all__ = ["GZIP_OVER", "JOB_KINDS", "KINDS", "MSG_ID", "SUBJECT_PREFIX", "batch_body", "dumps",
           "dumps_yielding", "gzip_body", "gzip_if_large", "json_ok"]
