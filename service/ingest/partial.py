"""A batch without its bad items, for the ingest path that has nobody to answer: the bus writer.

HTTP ingest refuses a batch with bad items as a whole (a 422 naming each one) and the sender sends
the rest again. A batch taken from the bus has no sender waiting, so the writer does the same
itself: drop the items the validator named, validate the rest, store that under the batch's own
id (a redelivery finds the same good items and the claim makes it a no-op) and dead-letter the bad
items with their reasons. Errors about the batch as a whole (its job, its batch id, its shape)
still refuse all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fabricscope.core.transport import named_items
from fabricscope.service.ingest.errors import IngestError, InvalidItems

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Rejected:
    """The bad items of a batch: ``body`` is the batch with only them (what is dead-lettered),
    ``detail`` their errors, each ``loc`` naming the item's position in the batch as received."""

    body: dict[str, Any]
    detail: list[dict[str, Any]]


def without_bad_items(body: dict[str, Any], kind: str,
                      validate: Callable[[dict[str, Any]], T]) -> tuple[T, dict[str, Any], Rejected | None]:
    """(what ``validate`` returns for the good items, the body of just those, the bad ones or None).

    Raises the validator's IngestError when nothing of the batch can be kept. Each round drops at
    least one item, so this ends; it takes more than two rounds only for more than
    ``contract.MAX_ITEM_ERRORS`` bad items.
    """
    current = body
    positions: list[int] | None = None  # where the items of ``current`` were in ``body``
    bad: list[Any] = []
    errors: list[IngestError] = []
    while True:
        try:
            result = validate(current)
        except IngestError as exc:
            named = named_items(exc.detail(), kind)
            if not named:  # about the batch as a whole
                raise
            items: list[Any] = current[kind]  # the validator named items of it: it is a list
            if positions is None:
                positions = list(range(len(items)))
            moved = [_moved(e, positions) for e in _errors(exc)]
            if len(named) >= len(items):
                if not errors:
                    raise
                raise InvalidItems(errors + moved) from exc  # positions as received, not as resent
            errors.extend(moved)
            drop = set(named)
            bad.extend(items[i] for i in named)
            positions = [p for i, p in enumerate(positions) if i not in drop]
            current = {**current, kind: [it for i, it in enumerate(items) if i not in drop]}
            continue
        if not bad:
            return result, current, None
        dead = {k: v for k, v in body.items() if k != kind}
        dead[kind] = bad
        return result, current, Rejected(dead, [d for e in errors for d in e.detail()])


def _errors(exc: IngestError) -> list[IngestError]:
    return exc.errors if isinstance(exc, InvalidItems) else [exc]


def _moved(exc: IngestError, positions: list[int]) -> IngestError:
    loc = list(exc.loc)
    loc[2] = positions[loc[2]]
    return IngestError(loc, exc.msg, exc.kind)
