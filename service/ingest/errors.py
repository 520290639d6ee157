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


class InvalidItems(IngestError):
    """Several items of a batch are bad: one detail entry per bad item (its first error), in item
    order, at most ``contract.MAX_ITEM_ERRORS``. Each entry's ``loc`` is ``["body", kind, index, ...]``,
    so a sender can resend the batch without exactly those items (docs/API.md)."""

    def __init__(self, errors: list[IngestError]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more bad items)" if len(errors) > 1 else ""
        super().__init__(first.loc, first.msg + more, first.kind)
        self.errors = errors

    def detail(self) -> list[dict[str, Any]]:
        return [d for e in self.errors for d in e.detail()]
