"""Property tests of the host formats (issue #43): inputs varied the way tools and pastes vary them
(column widths and order, tabs or spaces, CRLF, a header missing or repeated, lines cut, grep-filtered
pastes, N/A / [N/A] / Not Supported, 64-bit values up to the wrap). For every input:

- only typed errors (ParseError) are raised;
- every value that comes out is a value that was in the input (or, where a table sums keys, the sum of
  the input values it names; scaled by the rule);
- anything lost (a line not read, a cell not placed) is listed in ``problems``.

Run with more examples before committing a change to a parser: ``HYPOTHESIS_EXAMPLES=2000``.
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricscope.collectors.host import nic
from fabricscope.collectors.host.ethtool_maps import DRIVERS, driver_map
from fabricscope.collectors.host.gpu.dcgm import parse_dcgm
from fabricscope.collectors.host.gpu.maps import DCGM_FP64_BLANK, DCGM_INT64_BLANK
from fabricscope.collectors.host.gpu.topo_matrix import parse_topo_matrix
from fabricscope.collectors.host.pressure import parse_psi
from fabricscope.core.errors import ParseError

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "150"))
PROPS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]))
NOT_A_VALUE = st.sampled_from(["N/A", "[N/A]", "Not Supported", "-1", "", "0x10", "1.5", "12 packets"])


# -- ethtool -S ------------------------------------------------------------------------------------------
KEYS = st.sampled_from([
    "rx_bytes", "tx_bytes", "rx_bytes.nic", "tx_bytes.nic", "port.rx_bytes", "rx_priority_3_xoff.nic",
    "port.tx_priority_5_xoff", "rx_queue_0_bytes", "rx_queue_17_bytes", "tx_queue_3_packets", "rx_kicks",
    "rx_bytes_phy", "rx_prio3_pause", "rx_prio3_pause_duration", "rx_prio2_discards", "outbound_pci_stalled_rd",
    "rx_total_ring_discards", "rx_stat_discard", "[3]: rx_ucast_packets", "rx_discard_packets_cos2",
    "bw_out_allowance_exceeded", "pps_allowance_exceeded", "queue_2_rx_bytes", "ucast pkts rx", "Tx Queue#",
    "rx_no_buffers_posted[1]", "peer_ifindex", "some_vendor_key",
])


@st.composite
def ethtool_text(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]], int]:
    """(text, the key/value lines as written, the number of lines that are not `key: count`)."""
    lines: list[tuple[str, str]] = draw(st.lists(st.tuples(KEYS, st.one_of(U64.map(str), NOT_A_VALUE)),
                                                 min_size=1, max_size=25))
    indent = draw(st.sampled_from(["     ", "\t", "", "  "]))
    gap = draw(st.sampled_from([" ", "  ", "\t", ""]))
    out = [f"{indent}{k}:{gap}{v}" for k, v in lines]
    header = draw(st.sampled_from(["none", "top", "twice"]))
    if header in ("top", "twice"):
        out.insert(0, "NIC statistics:")
    if header == "twice":
        out.insert(len(out) // 2, "NIC statistics:")
    cut = draw(st.booleans())
    if cut:  # the paste ends mid-line
        at = draw(st.integers(0, len(out[-1])))
        out[-1] = out[-1][:at]
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(out) + eol
    written = [(k, v) for k, v in lines]
    if cut:
        last = out[-1].strip()
        key, sep, value = last.rpartition(":")
        written[-1] = (key.strip(), value.strip()) if sep else ("", last)
    bad = sum(1 for k, v in written if not (k and v.strip().isdigit())
              and (k or v.strip()) and not f"{k}:{v}".strip().endswith("statistics:"))
    return text, written, bad


@PROPS
@given(ethtool_text(), st.sampled_from([None, *DRIVERS]))
def test_ethtool_values_out_were_in_and_losses_are_said(case: tuple[str, list[tuple[str, str]], int],
                                                        driver: str | None) -> None:
    text, written, bad = case
    try:
        reading = nic.read_ethtool(text, "h:e", 1.0, driver)
    except ParseError:
        assert not any(k and v.strip().isdigit() for k, v in written)  # refused only when nothing was a count
        return
    # What went in, as the parser must have numbered it (a repeated key is key#1, key#2 ...).
    values: dict[str, int] = {}
    for k, v in written:
        if k and v.strip().isdigit():
            name, n = k, 0
            while name in values:
                n += 1
                name = f"{k}#{n}"
            values[name] = int(v.strip())
    dmap = driver_map(driver if driver is not None else nic.sniff_driver(values)[0])
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for key, v in values.items():
        res = nic._resolve(dmap, key)
        if res is None:
            continue
        metric, labels, scale, canonical, kind = res
        series = (metric, labels) if canonical else (metric, ())
        expected[series] = (expected.get(series, 0.0) if canonical and kind == "counter" else 0.0) + v * scale
    for s in reading.samples:
        assert s.value >= 0 and math.isfinite(s.value), s
        key = (s.metric, tuple(sorted((s.labels or {}).items())))
        assert key in expected and s.value == expected[key], (s, expected.get(key))
    lost = [p for p in reading.problems if p.startswith(("line not 'key: count'", "... and"))]
    assert (len(lost) if bad <= 20 else 21) == min(bad, 21)


# -- dcgm-exporter ---------------------------------------------------------------------------------------
FIELDS = st.sampled_from(["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                          "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED",
                          "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_UNKNOWN_THING"])
SCALE = {"DCGM_FI_DEV_SM_CLOCK": 1e6, "DCGM_FI_DEV_GPU_UTIL": 0.01}
DCGM_VALUES = st.one_of(st.integers(0, 2**64 - 1).map(float), st.floats(0, 1e6, allow_nan=False),
                        st.sampled_from([DCGM_INT64_BLANK, DCGM_FP64_BLANK, 9223372036854775794.0, 0.0]))


@st.composite
def dcgm_text(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, float]]]:
    rows = draw(st.lists(st.tuples(FIELDS, st.integers(0, 7), st.sampled_from([None, "", "1", "5"]), DCGM_VALUES),
                         min_size=1, max_size=20))
    sep = draw(st.sampled_from([",", ", "]))
    elide = draw(st.booleans())
    out, written = [], []
    for field, gpu, mig, value in rows:
        labels = [f'gpu="{gpu}"', 'UUID="GPU-x"', 'modelName="NVIDIA A800-SXM4-80GB"']
        if mig is not None:
            labels += ['GPU_I_PROFILE="2g.20gb"', f'GPU_I_ID="{mig}"']
        labels = draw(st.permutations(labels))
        if elide:
            labels.insert(1, "...")
        out.append(f"{field}{{{sep.join(labels)}}} {value!r}".replace("inf", "+Inf"))
        written.append((field, str(gpu), value))
    if draw(st.booleans()):
        out.insert(0, "# TYPE DCGM_FI_DEV_SM_CLOCK gauge")
    text = draw(st.sampled_from(["\n", "\r\n"])).join(out) + "\n"
    return text, written


@PROPS
@given(dcgm_text())
def test_dcgm_values_out_were_in_and_no_gpu_vanishes(case: tuple[str, list[tuple[str, str, float]]]) -> None:
    text, written = case
    try:
        reading = parse_dcgm(text, 1.0, "h")
    except ParseError:
        return
    for s in reading.samples:
        field_values = {v * SCALE.get(f, 1.0) for f, g, v in written if f"h:gpu{g}" == s.source}
        assert s.value >= 0 and any(math.isclose(s.value, v, rel_tol=1e-12) for v in field_values), s
    def blank(v: float) -> bool:  # DCGM's sentinels: 2**63 - 16 and up (int64), 2**47 (fp64)
        return v >= DCGM_INT64_BLANK or v == DCGM_FP64_BLANK

    unmapped = ("DCGM_FI_DEV_UNKNOWN_THING", "DCGM_FI_DEV_FB_USED")  # no rule reads these
    mapped = {f"h:gpu{g}" for f, g, v in written if not blank(v) and f not in unmapped}
    assert mapped <= {s.source for s in reading.samples}  # a GPU with a readable row is never lost
    if any(blank(v) for _f, _g, v in written):
        assert any("blank value" in p for p in reading.problems)


# -- PSI -------------------------------------------------------------------------------------------------
@st.composite
def psi_text(draw: st.DrawFn) -> tuple[str, dict[str, int]]:
    levels = draw(st.sampled_from([["some"], ["some", "full"], ["full", "some"]]))
    totals = {lv: draw(st.integers(0, 2**64 - 1)) for lv in levels}
    sep = draw(st.sampled_from([" ", "  ", "\t"]))
    lines = [sep.join([lv, "avg10=0.00", "avg60=1.25", "avg300=3.85", f"total={totals[lv]}"]) for lv in levels]
    text = draw(st.sampled_from(["\n", "\r\n"])).join(lines) + "\n"
    return text, totals


@PROPS
@given(psi_text())
def test_psi_totals_out_are_the_totals_in(case: tuple[str, dict[str, int]]) -> None:
    text, totals = case
    assert parse_psi(text) == {lv: t / 1e6 for lv, t in totals.items()}


# -- nvidia-smi topo -m ----------------------------------------------------------------------------------
CONN = st.sampled_from(["PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "NV4", "NV12", "NV18"])
CPUS = st.sampled_from(["0-23", "0-31,64-95", "14-27,42-55", "0", "56-111,168-223"])


@st.composite
def topo_text(draw: st.DrawFn) -> tuple[str, dict[str, str], dict[tuple[str, str], str], bool]:
    n_gpu, n_nic = draw(st.integers(1, 4)), draw(st.integers(0, 3))
    gpus, nics = [f"GPU{i}" for i in range(n_gpu)], [f"NIC{i}" for i in range(n_nic)]
    devs = gpus + nics
    pcie = CONN.filter(lambda c: not c.startswith("NV"))  # NV# only between GPUs
    conn = {(a, b): "X" if a == b else draw(CONN if b.startswith("GPU") and a.startswith("GPU") else pcie)
            for a in devs for b in devs}
    cpus = {g: draw(CPUS) for g in gpus}
    header = "\t" + "\t".join([*devs, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    rows = []
    for d in devs:
        cells = [" X " if conn[(d, c)] == "X" else conn[(d, c)] for c in devs]
        tail = [cpus[d], "0", "", "N/A"] if d in gpus else ["", "", "", ""]
        rows.append("\t".join([d, *cells, *tail]))
    run_together = draw(st.booleans()) and bool(nics)
    if run_together:  # the last matrix cell printed against the CPU affinity (narrow columns)
        last = nics[-1]
        cell, cpu = conn[(gpus[0], last)], cpus[gpus[0]]
        rows[0] = rows[0].replace(f"{cell}\t{cpu}", f"{cell}{cpu}")
    text = "\n".join([header, *rows, "", "Legend:", "", "  X    = Self"]) + "\n"
    if draw(st.booleans()):
        text = text.expandtabs(8)  # pasted into Markdown: tabs became spaces
    return text, cpus, conn, run_together


@PROPS
@given(topo_text())
def test_topo_cells_are_placed_or_said_never_shifted(case: tuple[str, dict[str, str], dict, bool]) -> None:
    text, cpus, conn, run_together = case
    try:
        topo = parse_topo_matrix(text)
    except ParseError:
        raise AssertionError("a well-formed matrix was refused") from None
    for key, value in topo.matrix.items():
        assert value == conn[key], (key, value)
    for gpu, value in topo.cpu_affinity.items():
        assert value is None or value == cpus[gpu], (gpu, value)  # never another column's value
    placed = sum(1 for g in cpus if topo.cpu_affinity.get(g) == cpus[g])
    assert placed == len(cpus) or topo.problems or topo.guesses  # what was not placed is said
    if run_together:
        assert any("ran into the next column" in p or "not a connection type" in p for p in topo.problems) or \
            any("header order" in g for g in topo.guesses)
