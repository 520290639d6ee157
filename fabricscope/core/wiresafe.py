"""One item of a batch that the server's JSON reader cannot take, found and named before sending,
so that it costs only itself (issue #46 item 6). Standard library only.

``json.dumps`` writes two things the server's reader (orjson) refuses, and with them the whole
body: a lone UTF-16 surrogate in a string (``"\\ud800"``) and an integer past the range of a double
(309 digits or more: it reads as infinity). A cheap scan of the encoded text says whether a batch
may hold either; only then is each item checked (:func:`clean_item`).

Names read from the operating system that are not UTF-8 (a NIC named with byte 0xff) reach Python
as surrogate escapes (U+DC80..U+DCFF, PEP 383). Those are not dropped but written reversibly:
each undecodable byte as the four characters ``\\xNN`` and, in such a name only, each backslash
doubled, so :func:`unescape_name` gives the original bytes back. A name that is valid UTF-8 is
never changed.
"""

from __future__ import annotations

import math
import re
from typing import Any

_SUSPECT = re.compile(r"\\ud[89a-f][0-9a-f]{2}|[0-9]{309}")
_ESCAPE = re.compile(r"\\\\|\\x([0-9a-f]{2})")


def maybe_unsafe(text: str) -> bool:
    """Whether ``text`` (json.dumps output, ASCII) may hold something the server cannot read: any
    surrogate escape (a character past U+FFFF is written as a pair of them too: then the items
    are checked, and kept) or a run of 309 digits."""
    return _SUSPECT.search(text) is not None


def escape_name(s: str) -> str:
    """``s`` with its undecodable bytes (surrogate escapes) written as ``\\xNN``; unchanged unless
    it has one."""
    if not any("\udc80" <= c <= "\udcff" for c in s):
        return s
    return s.replace("\\", "\\\\").encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def unescape_name(s: str) -> bytes:
    """The bytes of a name :func:`escape_name` wrote, when it held ``\\xNN`` (else its UTF-8)."""
    if not re.search(r"(?<!\\)(?:\\\\)*\\x[0-9a-f]{2}", s):
        return s.encode()
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(s):
        out += s[pos:m.start()].encode()
        out += b"\\" if m.group(1) is None else bytes([int(m.group(1), 16)])
        pos = m.end()
    return bytes(out + s[pos:].encode())


def _clean_str(s: str, path: str) -> str:
    for c in s:
        # U+DC80..U+DCFF: an undecodable byte (PEP 383), escaped below; any other surrogate in a
        # Python string is lone (a character past U+FFFF is one code point, never a pair)
        if "\ud800" <= c <= "\udfff" and not "\udc80" <= c <= "\udcff":
            raise ValueError(f"{path or 'item'}: a lone surrogate U+{ord(c):04X} is not text")
    return escape_name(s)


def _clean(o: Any, path: str) -> Any:
    if isinstance(o, str):
        return _clean_str(o, path)
    if isinstance(o, bool) or o is None:
        return o
    if isinstance(o, int):
        try:
            float(o)  # what the server reads it as
        except OverflowError:
            raise ValueError(f"{path or 'item'}: an integer of {len(str(abs(o)))} digits is past a double's "
                             "range") from None
        return o
    if isinstance(o, float):
        if not math.isfinite(o):
            raise ValueError(f"{path or 'item'}: {o} is not a JSON number")
        return o
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            sub = f"{path}.{k!s}" if path else str(k)
            out[_clean_str(str(k), sub)] = _clean(v, sub)
        return out
    if isinstance(o, (list, tuple)):
        return [_clean(v, f"{path}[{i}]") for i, v in enumerate(o)]
    return o  # numpy/torch scalars and the like: json's default turns them into numbers or text


def clean_item(item: Any) -> tuple[Any, str | None]:
    """(the item as it may be sent, None) or (None, why it cannot be: the field and the value's
    fault, never the value itself)."""
    try:
        return _clean(item, ""), None
    except ValueError as exc:
        return None, str(exc)


__all__ = ["clean_item", "escape_name", "maybe_unsafe", "unescape_name"]
