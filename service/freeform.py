"""The bounds of free-form objects and of sample labels (``service.contract``), as plain functions.

Shared by every validator that meets such an object: the reference loop and the msgspec fast path
of ingest, and the pydantic models of the inventory routes (job labels, extra attributes of
devices, interfaces and ranks), so that all of them refuse the same objects with the same words.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from fabricscope.service import contract

_MIN_JSON_INT = contract.MIN_INT
_MAX_JSON_INT = 2**64 - 1  # orjson, which serves some of these objects back, encodes up to u64


def problem(value: Any, *, max_depth: int = contract.MAX_DEPTH, inside: int = 0) -> str | None:
    """Why ``value`` (a decoded JSON value) cannot be stored as a free-form object, or None;
    ``inside``: how many levels of the stored object are above it (1 for an extra attribute).

    Hot: it runs on the attrs of every event of a batch. One ``orjson.dumps`` (C) clears the usual
    object: it fails on what it cannot encode (a key that is not a string, a 65-bit integer, more
    than 254 levels, a lone surrogate) and gives the size; containers cannot nest deeper than
    there are brackets, and NUL or a non-finite number (encoded as null) would show in its output.
    Anything it does not clear is walked exactly.
    """
    try:
        data = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return _walk(value, max_depth, inside) or "strings must be valid Unicode (no lone surrogates)"
    n = len(data)
    if n > contract.MAX_OBJECT_BYTES:
        return f"{n} bytes as JSON is over the limit of {contract.MAX_OBJECT_BYTES}"
    # Each level takes two bytes at least; a NUL is encoded with a backslash.
    levels = max_depth - inside
    deep = n > 2 * levels and data.count(b"{") + data.count(b"[") > levels
    if not deep and (b"\\" not in data or b"\\u0000" not in data) and b"null" not in data:
        return None
    return _walk(value, max_depth, inside)


def _walk(value: Any, max_depth: int, inside: int) -> str | None:
    """:func:`problem` node by node, with an explicit stack (a value nested thousands of levels deep
    costs a loop, not Python's recursion limit); where the trouble is (``a.b[2]``) is looked up only
    once there is some."""
    t = type(value)
    if t is not dict and t is not list:
        return _scalar(value)
    stack: list[tuple[Any, int]] = [(value, 1 + inside)]
    while stack:
        v, depth = stack.pop()
        if depth > max_depth:
            where = _at(_find(value, lambda _x, d: d + inside > max_depth))
            return f"nested deeper than {max_depth} levels{where}"
        if type(v) is dict:
            try:
                bad_key = "\x00" in "".join(v)
            except TypeError:  # a key that is not a string (not from JSON)
                bad_key = True
            if bad_key:
                return f"keys must be strings without NUL characters{_at(_find(value, _bad_keys))}"
            children: Any = v.values()
        else:
            children = v
        for x in children:
            tx = type(x)
            if tx is dict or tx is list:
                stack.append((x, depth + 1))
            elif tx is not str or "\x00" in x:
                why = _scalar(x)
                if why is not None:
                    return f"{why}{_at(_find(value, lambda y, _d, bad=x: y is bad))}"
    return None


def _scalar(x: Any) -> str | None:
    t = type(x)
    if t is str:
        return "strings must not contain NUL characters" if "\x00" in x else None
    if t is float:
        return None if math.isfinite(x) else "numbers must be finite"
    if t is int:
        return None if _MIN_JSON_INT <= x <= _MAX_JSON_INT else "integers must fit in 64 bits"
    if x is None or t is bool:
        return None
    return "not a JSON value"


def _bad_keys(x: Any, _depth: int) -> bool:
    return type(x) is dict and any(type(k) is not str or "\x00" in k for k in x)


def _find(value: Any, hit: Any) -> tuple[Any, ...]:
    """The path of the first node (breadth first) for which ``hit(node, depth)`` is true."""
    queue: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 1, ())]
    for v, depth, path in queue:
        if hit(v, depth):
            return path
        if type(v) is dict:
            queue.extend((x, depth + 1, (*path, k)) for k, x in v.items())
        elif type(v) is list:
            queue.extend((x, depth + 1, (*path, i)) for i, x in enumerate(v))
    return ()


def _at(path: tuple[Any, ...]) -> str:
    if not path:
        return ""
    out = ""
    for p in path:
        out += f"[{p}]" if type(p) is int else (f".{p}" if out else str(p))
    return f" (at {out[:200]})"


def check(value: Any) -> Any:
    """``value`` when it is a storable free-form object; ValueError (pydantic's validator error) if not."""
    why = problem(value)
    if why is not None:
        raise ValueError(why)
    return value


def check_member(value: Any) -> Any:
    """For one extra attribute of a model: it sits one level down in the stored object."""
    why = problem(value, inside=1)
    if why is not None:
        raise ValueError(why)
    return value


def labels_size_problem(canonical: bytes) -> str | None:
    """Why a label set (its canonical JSON: sorted keys, integers as strings) is too big to key a
    series, or None."""
    if len(canonical) > contract.LABELS_MAX_BYTES:
        return f"{len(canonical)} bytes as JSON is over the limit of {contract.LABELS_MAX_BYTES} per sample"
    return None


def check_labels_size(labels: dict[str, str | int] | None) -> dict[str, str | int] | None:
    """Pydantic's side of :func:`labels_size_problem`, on the same canonical form as ingest's."""
    if labels:
        canonical = orjson.dumps({k: v if type(v) is str else str(v) for k, v in labels.items()},
                                 option=orjson.OPT_SORT_KEYS)
        why = labels_size_problem(canonical)
        if why is not None:
            raise ValueError(why)
    return labels
