"""Ingest errors that become 4xx responses naming the offending field."""

from __future__ import annotations

from typing import Any

from fabricscope.core.errors import FabricscopeError


class IngestError(FabricscopeError):
    """Bad input: becomes a 4xx with FastAPI's ``{"detail": [{"loc", "msg", "type"}]}`` shape."""

    status_code = 422

    def __init__(self, loc: list[Any], msg: str, kind: str = "value_error") -> None:
        super().__init__(f"{'.'.join(str(p) for p in loc)}: {msg}")
        self.loc = loc
        self.msg = msg
        self.kind = kind

    def detail(self) -> list[dict[str, Any]]:
        return [{"loc": self.loc, "msg": self.msg, "type": self.kind}]


class TooLarge(IngestError):
    status_code = 413
