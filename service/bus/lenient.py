"""A bus message whose JSON orjson refuses, read item by item (issue #46 item 6).

A publisher other than ours (or one from before #46) may send a lone UTF-16 surrogate escape
(``"\\ud800"``) or a number past a double's range in one item. Both are valid JSON text that orjson,
and so :func:`codec.decode`, refuses as a whole: the writer dead-lettered the whole batch. Here
the standard library's reader takes the text, each item goes through the collectors' own check
(:func:`fabricscope.core.wiresafe.clean_item`: undecodable-byte escapes written ``\\xNN``, the rest
kept as it is) and an item that still cannot be stored is replaced by its JSON text, so that it is
refused by name and dead-lettered whole, while the other items are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from fabricscope.core.wiresafe import clean_item
from fabricscope.service.ingest.body import inflate
from fabricscope.service.ingest.errors import IngestError, InvalidItems

T = TypeVar("T")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def decode(data: bytes, headers: dict[str, str] | None, *, max_bytes: int) -> Any:
    """The body as the standard library reads it; the IngestError of a body that is not JSON."""
    gzipped = headers is not None and headers.get("Content-Encoding", "").lower() == "gzip"
    raw = inflate(data, gzipped=gzipped, max_bytes=max_bytes, noun="payload")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise IngestError(["body"], f"invalid JSON: {exc}", "json_invalid") from exc


def split(body: dict[str, Any], kind: str) -> dict[int, str]:
    """Clean the items of ``body[kind]`` in place; {position: why} of those that cannot be stored,
    each replaced by ``{"unreadable_item": <its JSON text>}`` (safe to dead-letter)."""
    items = body.get(kind)
    bad: dict[int, str] = {}
    if not isinstance(items, list):
        return bad
    for i, it in enumerate(items):
        clean, why = clean_item(it)
        if why is None:
            items[i] = clean
        else:
            bad[i] = why
            items[i] = {"unreadable_item": json.dumps(it, default=str)[:65536]}
    return bad


def refusing(bad: dict[int, str], kind: str, validate: Callable[[dict[str, Any]], T],
             body: dict[str, Any]) -> Callable[[dict[str, Any]], T]:
    """``validate``, which first refuses the unreadable items of ``body`` by name (once: the batch
    it is given again, without them, is another object)."""
    def run(b: dict[str, Any]) -> T:
        if b is body and bad:
            raise InvalidItems([IngestError(["body", kind, i, *_field(why)], why) for i, why in sorted(bad.items())])
        return validate(b)
    return run


def _field(why: str) -> list[str]:
    head = why.split(":", 1)[0]  # "labels.k" (wiresafe's path to the value)
    return [] if head == "item" else head.split(".")
