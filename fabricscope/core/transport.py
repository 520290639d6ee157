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
    said so); ``too_large`` (split the batch). A ``rejected`` outcome whose ``items`` is not empty
    refused only those items (their positions in the batch): the rest may be sent again without them.
    ``busy``: a ``retry`` from a service that answered (HTTP 429): it is up, only asking to wait."""

    kind: OutcomeKind
    reason: str = ""
    retry_after: float | None = None
    items: tuple[int, ...] = ()
    busy: bool = False


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


def http_outcome(status: int | None, reason: str = "", retry_after: float | None = None,
                 items: tuple[int, ...] = ()) -> Outcome:
    """The outcome of an HTTP-like status; None is no answer at all (connection error, timeout).
    ``items``: the bad items a 422 named (:func:`named_items`)."""
    if status is not None and 200 <= status < 300:
        return OK
    if status == 413:
        return Outcome("too_large", reason)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return Outcome("rejected", reason or f"HTTP {status}", items=items if status == 422 else ())
    return Outcome("retry", reason or (f"HTTP {status}" if status else "no answer"), retry_after,
                   busy=status == 429)


def named_items(detail: Any, kind: str) -> tuple[int, ...]:
    """The items of a ``kind`` batch that a 422's ``detail`` refused, when every error it lists is
    about one item (``loc`` = ``["body", kind, index, ...]``, docs/API.md); () when any error is
    about the batch as a whole (its job, its batch id, its shape), which no resend can fix."""
    if type(detail) is not list or not detail:
        return ()
    out: list[int] = []
    for err in detail:
        loc = err.get("loc") if type(err) is dict else None
        if type(loc) is not list or len(loc) < 3 or loc[0] != "body" or loc[1] != kind or type(loc[2]) is not int:
            return ()
        out.append(loc[2])
    return tuple(sorted(set(out)))


__all__ = ["OK", "Batch", "Outcome", "OutcomeKind", "Transport", "http_outcome", "named_items"]
