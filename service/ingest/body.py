"""Decode an ingest body (HTTP request or NATS message): optional gzip, size limits, JSON.

One function for both paths, so a batch is refused for the same reasons, with the same 4xx detail,
whichever way it came in.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from fabricscope.service.ingest.errors import IngestError, TooLarge


def decode_body(raw: bytes, *, gzipped: bool, max_bytes: int, noun: str = "body") -> Any:
    """The JSON value of ``raw``; ``noun`` names it in error messages ("body", "payload")."""
    raw = inflate(raw, gzipped=gzipped, max_bytes=max_bytes, noun=noun)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IngestError(["body"], f"invalid JSON: {exc}", "json_invalid") from exc


def inflate(raw: bytes, *, gzipped: bool, max_bytes: int, noun: str = "body") -> bytes:
    """The body's bytes, decompressed when gzipped, within ``max_bytes``, not empty."""
    if gzipped:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = d.decompress(raw, max_bytes)
        except zlib.error as exc:
            raise IngestError(["body"], f"Content-Encoding is gzip but the {noun} is not valid gzip",
                              "gzip_error") from exc
        if d.unconsumed_tail:
            raise TooLarge(["body"], f"decompressed {noun} is over the limit of {max_bytes} bytes", "too_long")
    elif len(raw) > max_bytes:
        raise TooLarge(["body"], f"{noun} is over the limit of {max_bytes} bytes", "too_long")
    if not raw:
        raise IngestError(["body"], f"empty {noun}: a JSON object is required", "missing")
    return raw
