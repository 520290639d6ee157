"""Bus messages: an docs/API.md batch body as JSON (gzip over a few KiB), one batch per message.

Pure functions, shared by every publisher and the writers. The batch id travels in the body (the
database claim in ``ingest_batches`` makes a redelivered batch add nothing) and in the
``Nats-Msg-Id`` header (JetStream drops a re-published copy inside its duplicate window, so a
publisher's retry does not even reach the writers).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from fabricscope.core import wire
from fabricscope.service.ingest.body import decode_body

PREFIX = wire.SUBJECT_PREFIX  # the collectors' NATS transport publishes to the same subjects
# "jobs" carries PUT /v1/jobs bodies (rank placement) from senders that register their job.
KINDS = ("samples", "steps", "collectives", "events", "jobs", "collective_summaries")
DEAD_PREFIX = "fabricscope.rejected"  # batches a writer refused (bad input), kept for people
GZIP_OVER = wire.GZIP_OVER
MSG_ID = wire.MSG_ID


def subject(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown ingest kind {kind!r}; one of {', '.join(KINDS)}")
    return f"{PREFIX}.{kind}"


def kind_of(subj: str) -> str | None:
    head, _, kind = subj.rpartition(".")
    return kind if head == PREFIX and kind in KINDS else None


def ensure_batch_id(body: dict[str, Any]) -> str:
    """The body's batch id, adding a fresh one when it has none (a message must be replay-safe)."""
    bid = body.get("batch_id")
    if not isinstance(bid, str) or not bid:
        bid = uuid.uuid4().hex
        body["batch_id"] = bid
    return bid


def encode(kind: str, body: dict[str, Any]) -> tuple[str, bytes, dict[str, str]]:
    """(subject, payload, headers) for one batch; gives the body a batch id when it has none."""
    subj = subject(kind)
    bid = ensure_batch_id(body)
    data, gzipped = wire.gzip_if_large(orjson.dumps(body))
    headers = {MSG_ID: f"{kind}:{bid}"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return subj, data, headers


def decode(data: bytes, headers: dict[str, str] | None, *, max_bytes: int) -> Any:
    """The body of a message; IngestError (like HTTP ingest) when it cannot be read."""
    gzipped = headers is not None and headers.get("Content-Encoding", "").lower() == "gzip"
    return decode_body(data, gzipped=gzipped, max_bytes=max_bytes, noun="payload")


def fallback_batch_id(stream: str, seq: int) -> str:
    """For a body published without a batch id by a third party: stable across redeliveries."""
    return f"nats:{stream}:{seq}"
