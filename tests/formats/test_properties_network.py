"""#43 properties of the network and training parsers over what tools vary: column widths and
order, tabs or spaces, CRLF, a header missing or repeated, lines cut, extra columns, values such as
N/A, ``[N/A]`` and ``Not Supported``, 20-digit and 64-bit-wrap values. For every input:

- only typed errors are raised (``FabricscopeError`` subclasses, nothing else);
- every value that comes out is a value that was in the input (scaled by the documented factor);
- anything lost is listed in ``problems``.
"""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricscope.collectors.switch.gnmi.parse import parse as gnmi_parse
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.collectors.switch.infiniband.topology import parse_ibnetdiscover
from fabricscope.collectors.switch.netconf import models
from fabricscope.collectors.switch.netconf.parse import parse as netconf_parse
from fabricscope.collectors.training.importers import nccl_inspector
from fabricscope.collectors.training.importers.nccl_tests import parse as nccl_parse
from fabricscope.core.errors import FabricscopeError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = 2**64 - 1
ODD = ["N/A", "[N/A]", "Not Supported", "nan", "inf", "-1", "1.5", "99999999999999999999", str(U64), str(2**64),
       "0x10", "", "null"]
# a device value: a plain count, the edges of 64 bits, or one of the odd spellings tools print
VALUES = st.one_of(st.integers(0, 10**12).map(str), st.sampled_from([*ODD, "0", str(U64 - 1)]))


def _counter_ok(text: str) -> float | None:
    """What a counter value must read as, or None if it must be skipped and named."""
    try:
        n = int(text.strip())
    except ValueError:
        return None
    return float(n) if 0 <= n <= U64 else None


# ---- nccl-tests text ----

GROUP = ("time", "algbw", "busbw", "#wrong")
EXTRA = ("algo", "proto", "nchannels")


@st.composite
def nccl_tables(draw: st.DrawFn) -> tuple[str, int]:
    """(output, rows written): a table with random widths, separators, an extra column or not, an N/A
    cell or not, CRLF or not, the header missing or repeated."""
    extra = draw(st.sampled_from([(), EXTRA[:1], EXTRA]))
    sep = draw(st.sampled_from([" ", "  ", "\t", " \t "]))
    width = draw(st.integers(0, 12))
    header = ["size", "count", "type", "redop", "root", *GROUP, *GROUP, *extra]
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
             "#  Rank  0 Group  0 Pid  1 on h1 device  0 [0x1b] NVIDIA H100 80GB HBM3",
             "#  Rank  1 Group  0 Pid  2 on h2 device  0 [0x1b] NVIDIA H100 80GB HBM3",
             f"#{' ' * 40}out-of-place{' ' * 20}in-place"]
    head_mode = draw(st.sampled_from(["once", "missing", "twice"]))
    if head_mode != "missing":
        lines.append("# " + sep.join(h.rjust(width) for h in header))
    n = draw(st.integers(1, 6))
    for i in range(n):
        size = 8 << i
        cells = [str(size), str(size // 4), "float", "sum", "-1"]
        for _ in range(2):
            t = draw(st.sampled_from(["12.5", "N/A", "1000", "0.01"]))
            cells += [t, "0.01", "0.02", draw(st.sampled_from(["0", "N/A", "1"]))]
        cells += [draw(st.sampled_from(["RING", "TREE", "8"])) for _ in extra]
        lines.append(sep.join(c.rjust(width) for c in cells))
        if head_mode == "twice" and i == 0:
            lines.append("# " + sep.join(h.rjust(width) for h in header))
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.02"]
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines) + eol
    if draw(st.booleans()):  # cut somewhere (a killed job, a truncated paste)
        text = text[:draw(st.integers(0, len(text)))]
    return text, n


@SETTINGS
@given(nccl_tables())
def test_nccl_tests_rows_come_from_the_input_and_losses_are_said(case: tuple[str, int]) -> None:
    text, written = case
    try:
        runs = nccl_parse(text, source="all_reduce_perf.log")
    except FabricscopeError:
        return
    tokens = set(re.split(r"\s+", text))
    got = 0
    for run in runs:
        for row in run["rows"]:
            got += 1
            for key in ("time_us", "algbw_gbps", "busbw_gbps"):
                assert any(_same(row[key], t) for t in tokens), (key, row[key])  # type: ignore[literal-required]
            assert str(row["size_bytes"]) in tokens
    lost = 2 * written - got
    if lost > 0:
        assert any(run["problems"] for run in runs)


def _same(value: float, token: str) -> bool:
    try:
        return float(token) == value
    except ValueError:
        return False


# ---- gNMI ----

def _note(itf: str, leaf: str, raw: str) -> gnmi_pb2.Notification:
    path = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                               gnmi_pb2.PathElem(name="interface", key={"name": itf}),
                               gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"),
                               gnmi_pb2.PathElem(name=leaf)])  # fmt: skip
    return gnmi_pb2.Notification(timestamp=1, update=[gnmi_pb2.Update(path=path, val=gnmi_pb2.TypedValue(
        json_ietf_val=raw.encode()))])


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["in-octets", "out-octets", "in-pkts", "in-weird-thing"]),
                          VALUES, st.booleans()), min_size=1, max_size=8))
def test_gnmi_values_out_were_in_and_bad_ones_are_named(leaves: list[tuple[str, str, bool]]) -> None:
    # each value as a JSON string, or raw (which may not be JSON at all)
    notes = [_note(f"e{i}", leaf, json.dumps(v) if quoted else v) for i, (leaf, v, quoted) in enumerate(leaves)]
    batch = gnmi_parse("sw1", notes)  # never raises
    for i, (leaf, v, quoted) in enumerate(leaves):
        got = [s.value for s in batch.samples if s.source == f"sw1:e{i}"]
        want = _counter_ok(v) if quoted or _is_json_number(v) else None
        decodable = quoted or _is_json(v)
        if leaf == "in-weird-thing" and not decodable:
            assert got == [] and any(f"e{i}" in p and "not JSON" in p for p in batch.problems)
        elif leaf == "in-weird-thing":
            assert got == [] and any(u.startswith("interfaces/interface/state/counters/in-weird-thing (")
                                     for u in batch.unmapped_list())
        elif want is None:
            assert got == [] and any(f"e{i}" in p for p in batch.problems), (v, batch.problems)
        else:
            assert got == [want]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _is_json_number(text: str) -> bool:
    try:
        return isinstance(json.loads(text), int | float) and not isinstance(json.loads(text), bool)
    except ValueError:
        return False


# ---- NETCONF (Junos) ----

@SETTINGS
@given(st.lists(VALUES, min_size=1, max_size=6), st.booleans())
def test_netconf_values_out_were_in_and_bad_ones_are_named(values: list[str], envelope: bool) -> None:
    entries = "".join(f"<physical-interface><name>e{i}</name><traffic-statistics><input-bytes>{v}</input-bytes>"
                      "</traffic-statistics></physical-interface>" for i, v in enumerate(values))
    body = f'<interface-information xmlns="http://xml.juniper.net/junos/22.4R0/junos-interface">{entries}' \
           "</interface-information>"
    poll = netconf_parse("qfx", f"<rpc-reply>{body}</rpc-reply>" if envelope else body, models.JUNOS, 1.0)
    for i, v in enumerate(values):
        got = [s.value for s in poll.samples if s.source == f"qfx:e{i}" and s.metric == "rx_bytes_total"]
        want = _counter_ok(v)
        if want is None:
            assert got == [] and any(f"qfx:e{i}:" in p for p in poll.problems)
        else:
            assert got == [want]


# ---- ibnetdiscover ----

GUIDS = st.one_of(st.integers(1, 2**64 - 1).map(lambda n: f"{n:016x}"),
                  st.sampled_from(["xxxxxxxxxxxxxxxx", "REDACTED", "0008f1040041001g"]))


@SETTINGS
@given(st.lists(st.tuples(GUIDS, GUIDS), min_size=1, max_size=5))
def test_ibnetdiscover_keeps_every_good_cable_and_names_every_bad_guid(pairs: list[tuple[str, str]]) -> None:
    lines = []
    for sw, host in pairs:
        lines += [f'Switch  8 "S-{sw}"   # "leaf-{sw[:4]}" base port 0 lid 3 lmc 0',
                  f'[1]  "H-{host}"[1]   # "node{host[:4]} mlx5_0" lid 4 4xEDR', ""]
    try:
        fabric = parse_ibnetdiscover("\n".join(lines))
    except FabricscopeError:
        return
    good = {g for pair in pairs for g in pair if re.fullmatch(r"[0-9a-f]{16}", g)}
    for c in fabric.cables:
        assert c.a_guid in good and c.b_guid in good
    for sw, host in pairs:
        if sw in good and host in good:
            assert any({c.a_guid, c.b_guid} == {sw, host} for c in fabric.cables)
    for g in {g for pair in pairs for g in pair} - good:
        assert sum(repr(g) in p for p in fabric.problems) == 1  # one line per bad GUID


# ---- NCCL Inspector ----

FIELD_VALUES = st.one_of(st.integers(0, 2**40), st.sampled_from(["N/A", None, [], {}, "12", 1.5, True]))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["coll_perf", "p2p_perf"]), FIELD_VALUES, FIELD_VALUES), max_size=6))
def test_inspector_records_out_were_in_and_skips_are_named(recs: list[tuple[str, object, object]]) -> None:
    objs = []
    for i, (kind, size, dur) in enumerate(recs):
        pre = nccl_inspector.KINDS[kind]
        perf = {pre: "AllReduce" if pre == "coll" else "Send", f"{pre}_sn": i, f"{pre}_msg_size_bytes": size,
                f"{pre}_exec_time_us": dur}
        objs.append({"header": {"id": "0x1", "rank": 0, "n_ranks": 2},
                     "metadata": {"dump_timestamp_us": 1_700_000_000_000_000}, kind: perf})
    got = nccl_inspector.read("\n".join(json.dumps(o) for o in objs), "r0.log")
    sizes = {json.dumps(s).strip('"') for _, s, _ in recs}
    for c in got.collectives:
        assert str(c["bytes"]) in sizes
    if len(got.collectives) < len(recs):
        assert len([p for p in got.problems if "skipped" in p]) == len(recs) - len(got.collectives)


# ---- perfquery ----

PQ_NAMES = ["PortXmitData", "XmtData", "PortRcvPkts", "RcvPkts", "SymbolErrorCounter", "SymbolErrors", "VL15Dropped"]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(PQ_NAMES), VALUES), min_size=1, max_size=7, unique_by=lambda t: t[0]),
       st.sampled_from(["\n", "\r\n"]), st.integers(1, 40))
def test_perfquery_values_out_were_in_and_bad_ones_are_named(fields: list[tuple[str, str]], eol: str,
                                                             dots: int) -> None:
    from fabricscope.collectors.switch.infiniband.formats import FORMATS

    read = next(f for f in FORMATS if f.name == "perfquery").read
    text = eol.join(["# Port extended counters: Lid 7 port 3", *(f"{n}:{'.' * dots}{v}" for n, v in fields)]) + eol
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "pq.txt"
        p.write_text(text, newline="")
        try:
            got = read(p, "sw", 1.0)
        except FabricscopeError:
            return
    inputs = {_pq_ok(v) for _, v in fields} - {None}
    for s in got.samples:
        assert s.value in inputs or s.value / 4 in inputs  # data counters are 4-octet words
    for name, v in fields:
        if _pq_ok(v) is None and v.strip():
            assert any(f"{name}=" in p for p in got.problems), (name, v, got.problems)


def _pq_ok(text: str) -> float | None:
    """perfquery prints some fields in hex (0x..): any base int() reads with base 0, within 64 bits."""
    try:
        n = int(text.strip(), 0)
    except ValueError:
        return None
    return float(n) if 0 <= n <= U64 else None
