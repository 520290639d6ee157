"""Mapping-table rules, the sysfs RDMA reader, the ioctl reader and the agent config validation.

The mapping-rule tests feed single counter names taken from the kernel drivers' string tables
(not a device dump) to pin each rule; whole recorded dumps are in test_parsers.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fabricscope.collectors.host import nic, rdma
from fabricscope.collectors.host.config import parse_config
from fabricscope.core.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _by_key(samples: list) -> dict:
    return {(s.metric, tuple(sorted((s.labels or {}).items()))): s.value for s in samples}


@pytest.mark.parametrize(
    ("driver", "key", "metric", "labels", "scale"),
    [
        ("mlx5_core", "rx_prio3_pause", "rx_pause_frames_total", {"priority": "3"}, 1.0),
        ("mlx5_core", "tx_prio3_pause", "tx_pause_frames_total", {"priority": "3"}, 1.0),
        ("mlx5_core", "rx_prio3_pause_duration", "pause_duration_seconds_total",
         {"priority": "3", "direction": "rx"}, 1e-6),
        ("mlx5_core", "rx_out_of_buffer", "rx_out_of_buffer_total", {}, 1.0),
        ("mlx5_core", "rx_discards_phy", "rx_discards_total", {}, 1.0),
        ("bnxt_en", "rx_pfc_ena_frames_pri3", "rx_pause_frames_total", {"priority": "3"}, 1.0),
        ("bnxt_en", "pfc_pri5_tx_duration_us", "pause_duration_seconds_total",
         {"priority": "5", "direction": "tx"}, 1e-6),
        ("bnxt_en", "rx_fcs_err_frames", "rx_fcs_errors_total", {}, 1.0),
        ("ice", "rx_priority_3_xoff.nic", "rx_pause_frames_total", {"priority": "3"}, 1.0),
        ("ice", "link_xoff_tx.nic", "tx_pause_frames_total", {}, 1.0),
        ("i40e", "port.rx_priority_3_xoff_rx", "rx_pause_frames_total", {"priority": "3"}, 1.0),
        ("i40e", "port.rx_crc_errors", "rx_fcs_errors_total", {}, 1.0),
        ("virtio_net", "rx_queue_1_drops", "rx_discards_total", {}, 1.0),
    ],
)
def test_rule(driver: str, key: str, metric: str, labels: dict, scale: float) -> None:
    out = nic.map_ethtool({key: 1000.0}, driver, 0.0, "h:x")
    assert _by_key(out) == {(metric, tuple(sorted(labels.items()))): 1000.0 * scale}


def test_unknown_keys_kept_as_extras_and_per_ring_dropped() -> None:
    out = _by_key(nic.map_ethtool({"rx_weird.Thing": 5.0, "rx7_packets": 9.0}, "mlx5_core", 0.0, "h:x"))
    assert out == {("ethtool_rx_weird_thing_total", ()): 5.0}
    assert _by_key(nic.map_ethtool({"whatever": 1.0}, "nosuchdriver", 0.0, "h:x")) == {
        ("ethtool_whatever_total", ()): 1.0}
    assert nic.map_ethtool({"whatever": 1.0}, None, 0.0, "h:x", extras=False) == []


def test_intel_packets_are_the_sum_of_cast_types() -> None:
    out = _by_key(nic.map_ethtool({"rx_unicast.nic": 10.0, "rx_multicast.nic": 2.0,
                                   "rx_broadcast.nic": 1.0}, "ice", 0.0, "h:x"))
    assert out == {("rx_packets_total", ()): 13.0}


def test_driver_counters_override_sysfs_for_the_same_series() -> None:
    base = nic.parse_netdev({"statistics/rx_bytes": "10", "operstate": "up"}, 0.0, "h:x")
    merged = _by_key(nic.merge(base, nic.map_ethtool({"rx_bytes_phy": 99.0}, "mlx5_core", 0.0, "h:x")))
    assert merged[("rx_bytes_total", ())] == 99.0 and merged[("oper_up", ())] == 1.0


def test_malformed_ethtool_output_is_a_parse_error() -> None:
    from fabricscope.core.errors import ParseError

    with pytest.raises(ParseError):
        nic.parse_ethtool_stats("Cannot get stats strings information: Operation not supported\n")
    assert nic.parse_ethtool_stats("NIC statistics:\n     ok: 1\n     bad: x\n  [0]: rx_x: 2\n") == {
        "ok": 1.0, "[0]: rx_x": 2.0}


def test_sysfs_rdma_tree_matches_the_tool_output(tmp_path: Path) -> None:
    """Lay the recorded `rdma statistic` values out the way the kernel exposes them (one file per
    hw counter) and check the sysfs reader yields what the text parser yields."""
    case = FIXTURES / "rdma/mlx5-rocep8s0f0-netdev-patch-2021"
    parsed = rdma.parse_rdma_statistic((case / "rdma-statistic.txt").read_text())
    for (dev, port), counters in parsed.items():
        d = tmp_path / "class/infiniband" / dev / "ports" / str(port) / "hw_counters"
        d.mkdir(parents=True)
        for name, value in counters.items():
            (d / name).write_text(f"{int(value)}\n")
        (d / "lifespan").write_text("10\n")  # a setting, not a counter: must be skipped
    got = rdma.RdmaCollector("node", sys_root=tmp_path).poll()
    want = rdma.map_port({}, parsed[("rocep8s0f0", 1)], 0.0, "node:rocep8s0f0")
    assert {(s.source, s.metric, s.value) for s in got} == {(s.source, s.metric, s.value) for s in want}
    assert rdma.RdmaCollector("node", sys_root=tmp_path / "none").poll() == []


def test_ib_port_source_names() -> None:
    assert rdma.ib_source("n7", "mlx5_2", 1) == "n7:mlx5_2"
    assert rdma.ib_source("n7", "mlx4_0", 2) == "n7:mlx4_0/2"


@pytest.mark.root
def test_ioctl_reader_equals_ethtool_binary() -> None:
    """Same names and values as `ethtool -S` on a real veth and on this machine's interfaces."""
    from fabricscope.collectors.host.ethtool_ioctl import EthtoolIoctl

    binary = shutil.which("ethtool")
    assert binary, "ethtool is installed by .ci/run (apt-get install -y ethtool)"
    subprocess.run(["ip", "link", "add", "fsvio0", "type", "veth", "peer", "name", "fsvio1"], check=True)
    try:
        reader, tool = EthtoolIoctl(), nic.SubprocessEthtool(binary)
        checked = 0
        for iface in ["fsvio0", *sorted(p.name for p in Path("/sys/class/net").iterdir())]:
            try:
                want = tool.stats(iface)
            except Exception:
                continue  # no driver stats (lo): the ioctl must refuse too
            assert reader.stats(iface)[0] == want[0]
            got = reader.stats(iface)[1]
            assert list(got) == list(want[1])
            checked += 1
        assert checked >= 1
        reader.close()
    finally:
        subprocess.run(["ip", "link", "del", "fsvio0"], check=False)


BASE = {"sink": {"url": "http://127.0.0.1:8000"}}


def test_config_defaults_and_example(tmp_path: Path) -> None:
    cfg = parse_config(BASE)
    assert cfg.nic.interval_s == 1.0 and cfg.storage.interval_s == 5.0 and cfg.host
    import yaml

    example = Path(__file__).resolve().parents[2] / "collectors/host/agent.example.yaml"
    raw = yaml.safe_load(example.read_text())
    (tmp_path / "tok").write_text("t\n")
    raw["sink"]["token_file"] = str(tmp_path / "tok")
    ex = parse_config(raw)
    assert ex.sink.url and ex.storage.volumes == ("/mnt/ckpt",) and ex.events.pfc_storm.min_duration_s == 3


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({}, "sink"),
        ({"sink": {"url": "x", "dsn": "postgresql://"}}, "sink"),
        ({"sink": {"url": "ftp://x"}}, "sink.url"),
        ({**BASE, "nic": {"interval_s": 0}}, "nic.interval_s"),
        ({**BASE, "nic": {"interval_s": "fast"}}, "nic.interval_s"),
        ({**BASE, "nic": {"ethtool": "magic"}}, "nic.ethtool"),
        ({**BASE, "nic": {"include": "eth0"}}, "nic.include"),
        ({**BASE, "nic": {"extras": "yes"}}, "nic.extras"),
        ({**BASE, "storage": {"volumes": [1]}}, "storage.volumes"),
        ({**BASE, "storage": {"intervl_s": 5}}, "storage.intervl_s"),
        ({**BASE, "events": {"pfc_storm": {"rate_per_s": -1}}}, "events.pfc_storm.rate_per_s"),
        ({**BASE, "events": {"ecn_burst": {"oops": 1}}}, "events.ecn_burst.oops"),
        ({**BASE, "sink": {"url": "http://x", "token_file": "/nonexistent/tok"}}, "sink.token_file"),
        ({**BASE, "colour": "blue"}, "colour"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_config_errors_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config(raw)


def test_token_never_in_repr(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("s3cret-token\n")
    cfg = parse_config({"sink": {"url": "http://x:1", "token_file": str(tok)}})
    assert cfg.sink.token == "s3cret-token"
    assert "s3cret" not in repr(cfg)


def test_extras_only_every_nth_poll_canonical_always() -> None:
    col = nic.NicCollector("h", sys_root=FIXTURES / "sysfs_net/debian12-vm-lo-eth0/sys", exclude=(),
                           ethtool=None, extras_every=3)
    polls = [{s.metric for s in col.poll() if s.source == "h:eth0"} for _ in range(4)]
    assert "netdev_multicast_total" in polls[0] and "netdev_multicast_total" in polls[3]
    assert not any(m.startswith("netdev_") for m in polls[1] | polls[2])
    for p in polls:
        assert {"rx_bytes_total", "tx_packets_total", "oper_up", "link_down_total"} <= p
