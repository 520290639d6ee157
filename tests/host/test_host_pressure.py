"""TCP, softnet, PSI and thermal-throttle collectors against recorded real ``/proc`` and ``/sys`` trees
(``tests/fixtures/host/<case>/``: ``case.json`` with the parameters, ``expected.json``, origins in
SOURCES.md), and ``fabricscope parse`` on each of their files.

Regenerate the expected.json files after a deliberate mapping change with
``.venv/bin/python tests/host/test_host_pressure.py --regen`` and review the diff.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fabricscope.collectors.host.pressure import PressureCollector, ThermalThrottle, parse_psi  # noqa: E402
from fabricscope.collectors.host.tcp import (  # noqa: E402
    TCP_COUNTERS,
    ColumnPicker,
    TcpCollector,
    parse_proc_net_pairs,
    parse_softnet_stat,
)
from fabricscope.core.errors import ParseError  # noqa: E402
from fabricscope.core.model import Sample  # noqa: E402
from tests.host.canon import canon

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host"
CASES = sorted(p for p in FIXTURES.iterdir() if (p / "case.json").exists())


def _collect(case: Path) -> list[Sample]:
    c = json.loads((case / "case.json").read_text())
    tcp = TcpCollector(c["host"], proc_root=case / "proc")
    pressure = PressureCollector(c["host"], proc_root=case / "proc", cgroup_root=case / "sys/fs/cgroup",
                                 cgroups=c.get("cgroups", ()), thermal_root=case / "sys")
    return tcp.poll() + pressure.poll()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_fixture_case(case: Path) -> None:
    actual = canon(_collect(case))
    assert actual == json.loads((case / "expected.json").read_text())
    keys = [(r["metric"], tuple(sorted(r.get("labels", {}).items()))) for r in actual]
    assert len(keys) == len(set(keys)), "one value per series per poll"
    assert all(r["value"] >= 0 for r in actual), "missing values are absent, never -1"


def test_cases_cover_every_collector_part() -> None:
    metrics = {r["metric"] for case in CASES for r in json.loads((case / "expected.json").read_text())}
    assert set(TCP_COUNTERS.values()) <= metrics
    assert {"softnet_dropped_total", "softnet_time_squeeze_total", "cpu_pressure_seconds_total",
            "io_pressure_seconds_total", "memory_pressure_seconds_total", "cpu_thermal_throttle_total"} <= metrics


def test_package_throttle_counted_once_per_package(tmp_path: Path) -> None:
    """Both CPUs of the recorded tree show package count 34818 (one package): the host has 34818,
    not 69636; core counts (10084 + 523) add up."""
    got = ThermalThrottle(FIXTURES / "procfs-fixtures/sys").read()
    assert got == {"core": 10607.0, "package": 34818.0}
    # A second package (a copy of cpu1 with another package id) adds its own package counter once.
    cpu = tmp_path / "devices/system/cpu"
    shutil.copytree(FIXTURES / "procfs-fixtures/sys/devices/system/cpu", cpu)
    shutil.copytree(cpu / "cpu1", cpu / "cpu2")
    (cpu / "cpu2/topology/physical_package_id").write_text("1\n")
    (cpu / "cpu2/thermal_throttle/package_throttle_count").write_text("5\n")
    assert ThermalThrottle(tmp_path).read() == {"core": 10607.0 + 523.0, "package": 34818.0 + 5.0}


def test_thermal_absent_where_the_kernel_has_none() -> None:
    col = PressureCollector("vm", proc_root=FIXTURES / "thisvm-6.18/proc", thermal_root=FIXTURES / "thisvm-6.18/sys")
    assert not [s for s in col.poll() if s.metric == "cpu_thermal_throttle_total"]


def test_cgroup_glob_picks_the_job_and_labels_it() -> None:
    case = FIXTURES / "thisvm-6.18"
    col = PressureCollector("n", proc_root=case / "proc", cgroup_root=case / "sys/fs/cgroup",
                            cgroups=("fabricscope-*", "no-such-job/*"), thermal_root=None)
    per_cg = [s for s in col.poll() if s.labels and "cgroup" in s.labels]
    assert {s.labels["cgroup"] for s in per_cg if s.labels} == {"fabricscope-rec"}
    some = [s.value for s in per_cg if s.metric == "cpu_pressure_seconds_total" and s.labels
            and s.labels["level"] == "some"]
    assert some == [0.01222]  # total=12220 microseconds


def test_column_cache_follows_a_new_key_line() -> None:
    """The column positions are cached per key line; a different kernel's key line (another order)
    must be resolved again, not read through the old positions."""
    vm = (FIXTURES / "thisvm-6.18/proc/net/netstat").read_text()
    other = (FIXTURES / "procfs-fixtures/proc/net/netstat").read_text()
    picker = ColumnPicker("netstat")
    first, second = picker.pick(vm), picker.pick(other)
    for text, got in ((vm, first), (other, second)):
        ref = parse_proc_net_pairs(text)
        assert got["tcp_timeouts_total"] == ref[("TcpExt", "TCPTimeouts")]
        assert got["tcp_listen_drops_total"] == ref[("TcpExt", "ListenDrops")]
    assert first != second


def test_malformed_inputs_raise_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_psi("cpu 12\n")
    with pytest.raises(ParseError):
        parse_softnet_stat("00015c73 zz\n")
    with pytest.raises(ParseError):
        parse_proc_net_pairs("Tcp: A B\nUdp: 1 2\n")


def test_malformed_softnet_keeps_the_rest_of_the_poll(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "thisvm-6.18/proc", tmp_path / "proc")
    (tmp_path / "proc/net/softnet_stat").write_text("garbage\n")
    metrics = {s.metric for s in TcpCollector("n", proc_root=tmp_path / "proc").poll()}
    assert "tcp_retransmitted_segments_total" in metrics and "softnet_dropped_total" not in metrics


# -- fabricscope parse: each format sniffed from a fixture file, no --format given -----------------
PARSE_CASES = [
    ("thisvm-6.18/proc/net/snmp", "proc-net-snmp", {"tcp_out_segments_total", "tcp_retransmitted_segments_total"}),
    ("procfs-fixtures/proc/net/snmp", "proc-net-snmp", {"tcp_out_segments_total", "tcp_retransmitted_segments_total"}),
    ("h200-gvisor/proc/net/netstat", "proc-net-netstat",
     {"tcp_timeouts_total", "tcp_lost_retransmits_total", "tcp_listen_drops_total"}),
    ("thisvm-6.18/proc/pressure/io", "proc-pressure", {"io_pressure_seconds_total"}),
    ("procfs-fixtures/proc/pressure/cpu", "proc-pressure", {"cpu_pressure_seconds_total"}),
    ("thisvm-6.18/sys/fs/cgroup/fabricscope-rec/cpu.pressure", "proc-pressure", {"cpu_pressure_seconds_total"}),
    ("../gpu/h200-device/proc-pressure.txt", "proc-pressure",  # `cat /proc/pressure/{cpu,io,memory}`
     {"cpu_pressure_seconds_total", "io_pressure_seconds_total", "memory_pressure_seconds_total"}),
    ("thisvm-6.18/proc/net/softnet_stat", "softnet-stat", {"softnet_dropped_total", "softnet_time_squeeze_total"}),
    ("procfs-fixtures/proc/net/softnet_stat", "softnet-stat", {"softnet_dropped_total", "softnet_time_squeeze_total"}),
]


@pytest.mark.parametrize(("rel", "fmt", "metrics"), PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_fabricscope_parse_sniffs_and_reads(rel: str, fmt: str, metrics: set[str]) -> None:
    import typer
    from typer.testing import CliRunner

    from fabricscope.collectors.formats.cli import parse_command

    app = typer.Typer()
    app.command()(parse_command)
    res = CliRunner().invoke(app, [str(FIXTURES / rel), "--device", "node07", "--ts", "1700000000"])
    assert res.exit_code in (0, 3), res.stderr
    summary = json.loads(res.stderr.split("summary ", 1)[1].splitlines()[0])
    assert (res.exit_code == 3) == bool(summary["guesses"])  # 3: a guess no option confirmed
    assert summary["format"] == fmt
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert {ln["metric"] for ln in lines} == metrics
    assert all(ln["source"] == "node07" and ln["ts"] == 1700000000.0 for ln in lines)


def test_parse_psi_dump_of_three_files_matches_the_split_files() -> None:
    """The H200 recording is the three PSI files in one; read in the order cpu, io, memory it gives
    what the three split files give, and the reading says which order it assumed."""
    from fabricscope.collectors.host.pressure import FORMATS

    fmt = FORMATS[0]
    dump = fmt.read(FIXTURES / "../gpu/h200-device/proc-pressure.txt", "n", 0.0)
    split = [s for r in ("cpu", "io", "memory") for s in fmt.read(FIXTURES / "h200-gvisor/proc/pressure" / r, "n",
                                                                      0.0).samples]
    assert dump.samples == split and len(split) == 6
    assert dump.problems == [] and dump.guesses[0].startswith("three PSI files in one: read as cpu, io, memory")
    with pytest.raises(ParseError):
        fmt.read(FIXTURES / "../gpu/h200-device/proc-net-netstat.txt", "n", 0.0)


def test_parse_values_match_the_collector() -> None:
    """The parse format and the agent's collector read the same numbers from the same file."""
    from fabricscope.collectors.host.tcp import FORMATS

    fmt = {f.name: f for f in FORMATS}
    text_path = FIXTURES / "procfs-fixtures/proc/net/snmp"
    read = {s.metric: s.value for s in fmt["proc-net-snmp"].read(text_path, "n", 0.0).samples}
    assert read == {"tcp_out_segments_total": 594855.0, "tcp_retransmitted_segments_total": 348.0}
    assert {k: v for k, v in ColumnPicker("snmp").pick(text_path.read_text()).items()} == read


if __name__ == "__main__" and "--regen" in sys.argv:
    for case in CASES:
        (case / "expected.json").write_text(json.dumps(canon(_collect(case)), indent=1) + "\n")
        print("wrote", case / "expected.json")
