"""What the batch sender asks of a way to reach the service: deliver one batch, say how it went.

A transport knows its wire (HTTP, NATS, the database) and nothing of queues, spools or retries;
the collectors' ``Sender`` owns those, identically for all of them. Shared by the collectors'
transports and the server's database transport.
Standard library only: the training hook uses the HTTP transport through this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

OutcomeKind = Literal["ok", "rejected", "retry", "too_large"]


@dataclass(frozen=True)
class Outcome:
    """``ok``; ``rejected`` (the service refused this batch's data: drop it, keep going);
    ``retry`` (the service is away or overloaded: try again later, ``retry_after`` seconds if it
    said so); ``too_large`` (split the batch)."""

    kind: OutcomeKind
    reason: str = ""
    retry_after: float | None = None


OK = Outcome("ok")


@dataclass
class Batch:
    """One batch as queued and spooled. ``kind`` is an ingest kind, or "job" for a job registration
    (then ``body`` is the PUT /v1/jobs body). ``body`` is the docs/API.md body, ``text`` its strict JSON."""

    kind: str
    job: str | None
    batch_id: str
    body: dict[str, Any]
    text: str


class Transport(Protocol):
    timeout_s: float  # the longest one send may block

    def send(self, batch: Batch) -> Outcome: ...

    def close(self) -> None: ...


def http_outcome(status: int | None, reason: str = "", retry_after: float | None = None) -> Outcome:
    """The outcome of an HTTP-like status; None is no answer at all (connection error, timeout)."""
    if status is not None and 200 <= status < 300:
        return OK
    if status == 413:
        return Outcome("too_large", reason)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return Outcome("rejected", reason or f"HTTP {status}")
    return Outcome("retry", reason or (f"HTTP {status}" if status else "no answer"), retry_after)


__all__ = ["OK", "Batch", "Outcome", "OutcomeKind", "Transport", "http_outcome"]
