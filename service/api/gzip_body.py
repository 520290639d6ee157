"""Gzip request bodies for the JSON routes other than ingest (docs/API.md: gzip request bodies accepted).

The ingest routes decompress their bodies themselves (service/ingest/body.py); for the other routes
service/api/limits.py feeds each received chunk to a :class:`GzipInflater` as it arrives, so the
compressed body is never held whole and the output can never outgrow the body limit.
"""

from __future__ import annotations

import zlib

from fabricscope.core.errors import FabricscopeError


class BodyTooLarge(FabricscopeError):
    """The decompressed body is over the limit (413)."""


class BadGzip(FabricscopeError):
    """Content-Encoding is gzip but the body is not a complete gzip stream (422)."""


class GzipInflater:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._parts: list[bytes] = []  # joined once at the end: no quadratic re-copying
        self._size = 0

    def feed(self, data: bytes) -> None:
        while data:
            # One byte over what is left is enough to know the limit is passed; a bomb stops here.
            try:
                out = self._inflater.decompress(data, self.max_bytes - self._size + 1)
            except zlib.error as exc:
                raise BadGzip("Content-Encoding is gzip but the body is not valid gzip") from exc
            self._size += len(out)
            if self._size > self.max_bytes:
                raise BodyTooLarge(f"decompressed body is over the limit of {self.max_bytes} bytes")
            self._parts.append(out)
            data = self._inflater.unconsumed_tail

    def finish(self) -> bytes:
        if not self._inflater.eof:
            raise BadGzip("Content-Encoding is gzip but the body is a truncated gzip stream")
        return b"".join(self._parts)
