"""Minimal, fast BER codec for SNMPv2c GetBulk requests and Response PDUs (RFC 3416).

pysnmp/pyasn1 spend ~0.1 ms of CPU per varbind building and checking typed ASN.1 objects. A v2c
poll needs none of that: the message is ``SEQUENCE {version, community, PDU {request-id,
error-status, error-index, SEQUENCE OF SEQUENCE {name, value}}}`` and a counter is a few bytes.
This module decodes exactly that shape straight from the datagram into ``(numeric OID, value)``
pairs, and encodes the GetBulk request. pysnmp stays the reference (tests/switch/test_ber.py
property-tests this decoder against pyasn1's encoder) and does SNMPv3.

Values come out as :mod:`.parse` wants them: ``int`` for INTEGER / Counter32 / Gauge32 / TimeTicks
/ Counter64 (unsigned ones read as unsigned even when an agent forgot the leading zero octet),
``bytes`` for OCTET STRING / IpAddress / Opaque, ``str`` for an OID value, and the singletons below
for NULL and the three v2 exceptions. Anything not shaped like a v2c message raises
:class:`ParseError`; indefinite lengths are refused (RFC 3417 §8 requires definite ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricscope.core.errors import ParseError


class Special:
    """NULL and the SNMPv2 exception values (no data, only which one it is)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL = Special("NULL")
NO_SUCH_OBJECT = Special("noSuchObject")
NO_SUCH_INSTANCE = Special("noSuchInstance")
END_OF_MIB_VIEW = Special("endOfMibView")

Decoded = int | bytes | str | Special

TAG_INTEGER, TAG_OCTETS, TAG_NULL, TAG_OID, TAG_SEQ = 0x02, 0x04, 0x05, 0x06, 0x30
TAG_IPADDR, TAG_COUNTER32, TAG_GAUGE32, TAG_TIMETICKS, TAG_OPAQUE, TAG_COUNTER64 = 0x40, 0x41, 0x42, 0x43, 0x44, 0x46
TAG_UINT32 = 0x47  # RFC 1442 UInteger32, obsolete but still sent by a few agents
PDU_RESPONSE, PDU_GETBULK = 0xA2, 0xA5
_UNSIGNED = frozenset((TAG_COUNTER32, TAG_GAUGE32, TAG_TIMETICKS, TAG_COUNTER64, TAG_UINT32))
_BYTES = frozenset((TAG_OCTETS, TAG_IPADDR, TAG_OPAQUE))
_SPECIAL = {TAG_NULL: NULL, 0x80: NO_SUCH_OBJECT, 0x81: NO_SUCH_INSTANCE, 0x82: END_OF_MIB_VIEW}

ERROR_STATUS = (
    "noError", "tooBig", "noSuchName", "badValue", "readOnly", "genErr", "noAccess", "wrongType",
    "wrongLength", "wrongEncoding", "wrongValue", "noCreation", "inconsistentValue",
    "resourceUnavailable", "commitFailed", "undoFailed", "authorizationError", "notWritable",
    "inconsistentName",
)  # fmt: skip

# Polls repeat the same instance OIDs every interval (and across devices of one model), so the
# text of an encoded OID is looked up rather than rebuilt; bounded so a hostile agent cannot grow it.
_OID_CACHE: dict[bytes, str] = {}
_OID_CACHE_MAX = 200_000


@dataclass(slots=True)
class Response:
    request_id: int
    error_status: int
    error_index: int
    varbinds: list[tuple[str, Decoded]]
    community: bytes


def _oid_text(raw: bytes) -> str:
    if not raw:
        raise ParseError("empty OBJECT IDENTIFIER")
    if raw[-1] & 0x80:
        raise ParseError("truncated OBJECT IDENTIFIER sub-identifier")
    parts: list[int] = []
    acc = 0
    for b in raw:
        acc = (acc << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(acc)
            acc = 0
    first = parts[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(map(str, head + parts[1:]))


def oid_text(raw: bytes) -> str:
    s = _OID_CACHE.get(raw)
    if s is None:
        s = _oid_text(raw)
        if len(_OID_CACHE) >= _OID_CACHE_MAX:
            _OID_CACHE.clear()
        _OID_CACHE[raw] = s
    return s


def _length(data: bytes, i: int, end: int) -> tuple[int, int]:
    """Definite length at ``data[i]`` → (length, offset of the contents); must fit before ``end``."""
    if i >= end:
        raise ParseError("truncated: length expected")
    b = data[i]
    if b < 0x80:
        n, i = b, i + 1
    else:
        k = b & 0x7F
        if k == 0:
            raise ParseError("indefinite length is not allowed in SNMP")
        if k > 4 or i + 1 + k > end:
            raise ParseError("bad length octets")
        n, i = int.from_bytes(data[i + 1 : i + 1 + k], "big"), i + 1 + k
    if i + n > end:
        raise ParseError(f"truncated: {n} octets announced, {end - i} left")
    return n, i


def _expect(data: bytes, i: int, end: int, tag: int, what: str) -> tuple[int, int]:
    if i >= end or data[i] != tag:
        got = f"0x{data[i]:02x}" if i < end else "end of data"
        raise ParseError(f"{what}: expected tag 0x{tag:02x}, got {got}")
    return _length(data, i + 1, end)


def _int(data: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    n, i = _expect(data, i, end, TAG_INTEGER, what)
    if n == 0:
        raise ParseError(f"{what}: empty INTEGER")
    return int.from_bytes(data[i : i + n], "big", signed=True), i + n


def decode_response(data: bytes) -> Response:
    """A v2c Response (or any v1/v2c PDU of the same shape) → :class:`Response`."""
    end = len(data)
    n, i = _expect(data, 0, end, TAG_SEQ, "message")
    end = i + n  # trailing octets after the message are ignored, as pyasn1 does
    version, i = _int(data, i, end, "version")
    if version != 1:
        raise ParseError(f"not an SNMPv2c message (version field {version})")
    n, i = _expect(data, i, end, TAG_OCTETS, "community")
    community, i = data[i : i + n], i + n
    if i >= end or data[i] != PDU_RESPONSE:
        raise ParseError(f"not a Response PDU (tag 0x{data[i]:02x})" if i < end else "PDU missing")
    n, i = _length(data, i + 1, end)
    end = i + n
    request_id, i = _int(data, i, end, "request-id")
    error_status, i = _int(data, i, end, "error-status")
    error_index, i = _int(data, i, end, "error-index")
    n, i = _expect(data, i, end, TAG_SEQ, "varbind list")
    vend = i + n
    out: list[tuple[str, Decoded]] = []
    append, from_bytes, special, cache = out.append, int.from_bytes, _SPECIAL, _OID_CACHE
    while i < vend:
        # the hot loop: one varbind is SEQUENCE {OID, value}; lengths are nearly always short form
        if data[i] != TAG_SEQ:
            raise ParseError(f"varbind {len(out)}: expected SEQUENCE, got 0x{data[i]:02x}")
        n = data[i + 1] if i + 1 < vend else 0x80
        if n < 0x80 and i + 2 + n <= vend:
            i += 2
        else:
            n, i = _length(data, i + 1, vend)
        bend = i + n
        if i + 1 >= bend or data[i] != TAG_OID:
            raise ParseError(f"varbind {len(out)}: name is not an OBJECT IDENTIFIER")
        n = data[i + 1]
        if n < 0x80 and i + 2 + n <= bend:
            i += 2
        else:
            n, i = _length(data, i + 1, bend)
        raw = data[i : i + n]
        name = cache.get(raw) or oid_text(raw)
        i += n
        if i + 1 >= bend:
            raise ParseError(f"varbind {len(out)} ({name}): value missing")
        tag, n = data[i], data[i + 1]
        if n < 0x80 and i + 2 + n <= bend:
            i += 2
        else:
            n, i = _length(data, i + 1, bend)
        raw = data[i : i + n]
        i += n
        if i != bend:
            raise ParseError(f"varbind {len(out)} ({name}): {bend - i} stray octets")
        value: Decoded
        if tag in _UNSIGNED:
            value = from_bytes(raw, "big")
        elif tag == TAG_INTEGER:
            value = from_bytes(raw, "big", signed=True)
        elif tag in _BYTES:
            value = raw
        elif tag in special:
            value = special[tag]
        elif tag == TAG_OID:
            value = oid_text(raw)
        else:
            value = raw  # unknown application type: kept as octets; parse reports it if it matters
        append((name, value))
    return Response(request_id, error_status, error_index, out, community)


# ---- encoding (requests only) ----


def _enc_len(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(body),)) + body


def _tlv(tag: int, body: bytes) -> bytes:
    return bytes((tag,)) + _enc_len(len(body)) + body


def _enc_int(v: int) -> bytes:
    return _tlv(TAG_INTEGER, v.to_bytes(v.bit_length() // 8 + 1, "big", signed=True))


_OID_ENC_CACHE: dict[str, bytes] = {}


def encode_oid(oid: str) -> bytes:
    """Dotted numeric OID → its BER TLV (cached: request OIDs repeat every poll)."""
    tlv = _OID_ENC_CACHE.get(oid)
    if tlv is not None:
        return tlv
    try:
        arcs = [int(p) for p in oid.strip(".").split(".")]
    except ValueError as exc:
        raise ParseError(f"not a numeric OID: {oid!r}") from exc
    if len(arcs) < 2 or arcs[0] > 2 or (arcs[0] < 2 and arcs[1] >= 40) or min(arcs) < 0:
        raise ParseError(f"not a valid OID: {oid!r}")
    body = bytearray()
    for arc in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body += bytes(reversed(chunk))
    tlv = _tlv(TAG_OID, bytes(body))
    if len(_OID_ENC_CACHE) >= _OID_CACHE_MAX:
        _OID_ENC_CACHE.clear()
    _OID_ENC_CACHE[oid] = tlv
    return tlv


_NULL_TLV = b"\x05\x00"


def encode_getbulk(community: bytes, request_id: int, non_repeaters: int, max_repetitions: int,
                   oids: list[str]) -> bytes:  # fmt: skip
    """SNMPv2c GetBulkRequest message for ``oids`` (all values NULL)."""
    vbl = b"".join(_tlv(TAG_SEQ, encode_oid(o) + _NULL_TLV) for o in oids)
    pdu = _enc_int(request_id) + _enc_int(non_repeaters) + _enc_int(max_repetitions) + _tlv(TAG_SEQ, vbl)
    return _tlv(TAG_SEQ, _enc_int(1) + _tlv(TAG_OCTETS, community) + _tlv(PDU_GETBULK, pdu))
