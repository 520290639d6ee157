"""The fast v2c BER codec against pysnmp/pyasn1, the reference: random messages encoded by pyasn1
must decode to exactly what pyasn1 decodes them to; our GetBulk request must decode in pyasn1 to
what we meant; damaged datagrams raise ParseError and nothing else."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyasn1.codec.ber import decoder, encoder
from pyasn1.type import univ
from pysnmp.proto import rfc1902, rfc1905
from pysnmp.proto.api import v2c

from fabricscope.collectors.switch.snmp import ber
from fabricscope.core.errors import ParseError

arcs = st.integers(0, 2**32 - 1)
heads = st.one_of(st.tuples(st.integers(0, 1), st.integers(0, 39)), st.tuples(st.just(2), arcs))
oids = st.builds(lambda head, rest: ".".join(map(str, (*head, *rest))), heads, st.lists(arcs, max_size=14))
# (pysnmp value, what our decoder must give for it)
values = st.one_of(
    st.integers(-(2**31), 2**31 - 1).map(lambda v: (rfc1902.Integer32(v), v)),
    st.binary(max_size=300).map(lambda v: (rfc1902.OctetString(v), v)),
    st.just((v2c.Null(""), ber.NULL)),
    oids.map(lambda v: (rfc1902.ObjectIdentifier(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (rfc1902.Counter32(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (rfc1902.Gauge32(v), v)),
    st.integers(0, 2**32 - 1).map(lambda v: (rfc1902.TimeTicks(v), v)),
    st.integers(0, 2**64 - 1).map(lambda v: (rfc1902.Counter64(v), v)),
    st.binary(min_size=4, max_size=4).map(lambda v: (rfc1902.IpAddress(v), v)),
    st.just((rfc1905.noSuchObject, ber.NO_SUCH_OBJECT)),
    st.just((rfc1905.noSuchInstance, ber.NO_SUCH_INSTANCE)),
    st.just((rfc1905.endOfMibView, ber.END_OF_MIB_VIEW)),
)
varbinds = st.lists(st.tuples(oids, values), max_size=60)


def pysnmp_response(community: bytes, request_id: int, status: int, index: int, vbs) -> bytes:
    pdu = v2c.ResponsePDU()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, request_id)
    v2c.apiPDU.set_error_status(pdu, status)
    v2c.apiPDU.set_error_index(pdu, index)
    v2c.apiPDU.set_varbinds(pdu, [(rfc1902.ObjectName(o), val) for o, (val, _) in vbs])
    msg = v2c.Message()
    v2c.apiMessage.set_defaults(msg)
    v2c.apiMessage.set_community(msg, community)
    v2c.apiMessage.set_pdu(msg, pdu)
    return encoder.encode(msg)


def reference(value) -> object:
    """pyasn1's decoded value in our decoder's terms (the oracle's side of the comparison)."""
    specials = {rfc1905.NoSuchObject: ber.NO_SUCH_OBJECT, rfc1905.NoSuchInstance: ber.NO_SUCH_INSTANCE,
                rfc1905.EndOfMibView: ber.END_OF_MIB_VIEW, v2c.Null: ber.NULL}  # fmt: skip
    for cls, mark in specials.items():
        if isinstance(value, cls):
            return mark
    if isinstance(value, univ.OctetString):  # also IpAddress, Opaque (rfc1902 types subclass these)
        return bytes(value.asOctets())
    if isinstance(value, univ.ObjectIdentifier):  # pyasn1 decodes OID values as univ, not rfc1902
        return str(value)
    return int(value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1), st.integers(0, 18), st.integers(0, 60), varbinds)
def test_decodes_what_pyasn1_encodes_exactly_as_pyasn1_decodes_it(community, request_id, status, index, vbs):
    data = pysnmp_response(community, request_id, status, index, vbs)
    got = ber.decode_response(data)
    msg, _ = decoder.decode(data, asn1Spec=v2c.Message())
    pdu = v2c.apiMessage.get_pdu(msg)
    assert got.community == bytes(v2c.apiMessage.get_community(msg)) == community
    assert got.request_id == int(v2c.apiPDU.get_request_id(pdu)) == request_id
    assert (got.error_status, got.error_index) == (status, index)
    expected = [(str(name), reference(val)) for name, val in v2c.apiPDU.get_varbinds(pdu)]
    assert got.varbinds == expected
    assert got.varbinds == [(o, want) for o, (_, want) in vbs]  # and both say what was encoded


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(1, 2**31 - 1), st.integers(0, 10), st.integers(0, 200),
       st.lists(oids, min_size=1, max_size=40))  # fmt: skip
def test_getbulk_request_reads_back_in_pyasn1(community, request_id, non_rep, reps, names):
    data = ber.encode_getbulk(community, request_id, non_rep, reps, names)
    msg, rest = decoder.decode(data, asn1Spec=v2c.Message())
    assert rest == b""
    assert int(v2c.apiMessage.get_version(msg)) == 1 and bytes(v2c.apiMessage.get_community(msg)) == community
    pdu = v2c.apiMessage.get_pdu(msg)
    assert pdu.isSameTypeWith(v2c.GetBulkRequestPDU())
    assert int(v2c.apiBulkPDU.get_request_id(pdu)) == request_id
    assert int(v2c.apiBulkPDU.get_non_repeaters(pdu)) == non_rep
    assert int(v2c.apiBulkPDU.get_max_repetitions(pdu)) == reps
    got = v2c.apiBulkPDU.get_varbinds(pdu)
    assert [str(n) for n, _ in got] == names and all(isinstance(v, v2c.Null) for _, v in got)


@settings(max_examples=300, deadline=None)
@given(varbinds.filter(bool), st.data())
def test_damaged_datagrams_raise_parse_error_only(vbs, data):
    msg = pysnmp_response(b"public", 7, 0, 0, vbs)
    cut = data.draw(st.integers(0, len(msg) - 1))
    with pytest.raises(ParseError):
        ber.decode_response(msg[:cut])  # every truncation is caught, at any depth
    pos = data.draw(st.integers(0, len(msg) - 1))
    flipped = msg[:pos] + bytes((msg[pos] ^ data.draw(st.integers(1, 255)),)) + msg[pos + 1 :]
    with contextlib.suppress(ParseError):
        ber.decode_response(flipped)  # may still be a valid message; must not crash differently


def test_unsigned_types_read_unsigned_even_without_the_leading_zero_octet():
    # some agents encode Counter32 4294967295 as ff ff ff ff (negative in strict BER)
    body = b"\x06\x06\x2b\x06\x01\x02\x01\x01" + b"\x41\x04\xff\xff\xff\xff"
    vb = b"\x30" + bytes((len(body),)) + body
    pdu = b"\x02\x01\x05\x02\x01\x00\x02\x01\x00\x30" + bytes((len(vb),)) + vb
    msg = b"\x02\x01\x01\x04\x01p\xa2" + bytes((len(pdu),)) + pdu
    got = ber.decode_response(b"\x30" + bytes((len(msg),)) + msg)
    assert got.varbinds == [("1.3.6.1.2.1.1", 4294967295)]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "expected tag 0x30"),
        (b"\x30\x80\x02\x01\x01\x00\x00", "indefinite length"),
        (pysnmp_response(b"p", 1, 0, 0, [])[:-1], "truncated"),
        (bytes.fromhex("3014020100040170a20d020101020100020100300030"), "version field 0"),  # SNMPv1
        (bytes.fromhex("3016020101040170a20e0201010201000201003003300106"), "varbind 0"),
    ],
)
def test_malformed_messages_say_why(data, why):
    with pytest.raises(ParseError, match=why):
        ber.decode_response(data)


def test_v1_and_request_pdus_are_not_mistaken_for_a_v2c_response():
    req = ber.encode_getbulk(b"public", 3, 0, 10, ["1.3.6.1.2.1.2.2.1.10"])
    with pytest.raises(ParseError, match="not a Response PDU"):
        ber.decode_response(req)
