"""core/wiresafe.py (issue #46 item 6): what it lets through the server's JSON reader (orjson) reads,
for every input; what it escapes comes back byte for byte."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricscope.core.wiresafe import clean_item, escape_name, maybe_unsafe, unescape_name

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())  # surrogates too
TEXT = st.text(ANY_CHAR, max_size=12)
SCALARS = (st.none() | st.booleans() | TEXT | st.floats(allow_nan=True, allow_infinity=True)
           | st.integers() | st.integers(min_value=-(10 ** 400), max_value=10 ** 400))
JSONISH = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(TEXT, kids, max_size=4),
                       max_leaves=12)


@settings(max_examples=400)
@given(JSONISH)
def test_what_is_kept_is_read_by_the_server(item: object) -> None:
    clean, why = clean_item(item)
    if why is not None:
        assert clean is None and why
        return
    try:
        text = json.dumps(clean, allow_nan=False)
    except ValueError:  # NaN/inf and over-long ints: json refuses them, the sender drops those items
        return
    orjson.loads(text)  # never raises for what clean_item kept


@settings(max_examples=400)
@given(st.binary(max_size=24))
def test_names_that_are_not_utf8_come_back_byte_for_byte(raw: bytes) -> None:
    name = raw.decode("utf-8", "surrogateescape")  # what os.listdir gives for such a file name
    stored = escape_name(name)
    stored.encode("utf-8")  # it is text now
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        assert unescape_name(stored) == raw
    else:
        assert stored == name  # a UTF-8 name is never changed


@settings(max_examples=400)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=24))
def test_text_is_kept_as_it_is(s: str) -> None:
    assert clean_item({"s": s}) == ({"s": s}, None)


def test_the_scan_finds_both_faults() -> None:
    assert maybe_unsafe(json.dumps({"k": "a\ud800"})) and maybe_unsafe(json.dumps(10 ** 400))
    assert not maybe_unsafe(json.dumps({"k": "plain", "v": 1.5e300, "n": 2 ** 64}))
    assert clean_item({"v": 10 ** 400})[1] == "v: an integer of 401 digits is past a double's range"
    assert clean_item({"a": [{"b": "x\udfff"}]})[1] == "a[0].b: a lone surrogate U+DFFF is not text"
