"""One conversion of a device's value to a sample value, shared by every collector and parser.

A device reply is read value by value: one value that cannot be a number (text, JSON null, a
list), that cannot be the counter it claims to be (a 20-digit count past 2**64 - 1, a negative
count, a fraction) or that is no finite number (NaN, inf, too big for a float) must cost that one
value only. Each of these raises :class:`BadValue`, a ``ValueError`` (so existing ``except
ValueError`` skips keep working) and a ``ParseError`` (so it is typed); the caller names the value
and the device in its problems or log and keeps the rest of the reply.
"""

from __future__ import annotations

import math
from typing import Any

from fabricscope.core.errors import ParseError

U64_MAX = 2**64 - 1  # every counter a device keeps (SNMP Counter64, OpenConfig, ethtool) fits in 64 bits
_SHOWN = 40  # characters of a bad value kept in a message: enough to recognise, never a whole blob


class BadValue(ParseError, ValueError):
    """A device value that cannot be a sample value; the message shows (a prefix of) the value."""


def shown(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}...({len(text)} chars)"


def counter(raw: Any) -> float:
    """A counter: a whole number 0 <= n <= 2**64 - 1, as int, integral float or decimal text."""
    if isinstance(raw, bool) or raw is None:
        raise BadValue(f"{shown(raw)} is not a count")
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", errors="replace")
    try:
        if isinstance(raw, str):
            n = int(raw.strip())
        elif isinstance(raw, int):
            n = raw
        elif isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
            n = int(raw)
        else:
            raise BadValue(f"{shown(raw)} is not a count")
    except ValueError as exc:  # int("abc"), int("1e5"), int("") (BadValue is a ValueError too)
        if isinstance(exc, BadValue):
            raise
        raise BadValue(f"{shown(raw)} is not a count") from exc
    if not 0 <= n <= U64_MAX:
        raise BadValue(f"{shown(raw)} is out of a 64-bit counter's range")
    return float(n)


def gauge(raw: Any) -> float:
    """A gauge (may be negative or fractional): any finite number, as int, float or decimal text."""
    if isinstance(raw, bool) or raw is None:
        raise BadValue(f"{shown(raw)} is not a number")
    if isinstance(raw, bytes):
        raw = raw.decode("ascii", errors="replace")
    try:
        if isinstance(raw, str):
            value = float(raw.strip())
        elif isinstance(raw, int | float):
            value = float(raw)
        else:
            raise BadValue(f"{shown(raw)} is not a number")
    except OverflowError as exc:  # float(10**400)
        raise BadValue(f"{shown(raw)} is too big for a number") from exc
    except ValueError as exc:
        if isinstance(exc, BadValue):
            raise
        raise BadValue(f"{shown(raw)} is not a number") from exc
    if not math.isfinite(value):
        raise BadValue(f"{shown(raw)} is not a finite number")
    return value
