"""The agent on an Intel E810 (ice, 64 queue pairs): the driver comes from sysfs, not from the keys, so
the ice table reads the port's own counters. Before #43 the ice table summed the VSI's ``rx_bytes`` with the
port's ``rx_bytes.nic`` (and ``parse`` took the 512 per-queue keys for virtio_net, dropping every pause
counter). Fixture: tests/fixtures/host/e810-ice-ethq/README.md."""

from __future__ import annotations

import re
import stat
from pathlib import Path

from fabricscope.collectors import selfmetrics
from fabricscope.collectors.host.agent import Agent, sink_from_config
from fabricscope.collectors.host.config import parse_config
from fabricscope.collectors.host.nic import NicCollector
from tests.sinks.receiver import Receiver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASE = FIXTURES / "host/e810-ice-ethq"
RECORDED = FIXTURES / "ethtool/ice-ethq/ethtool-S.txt"


def _keys() -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*([\w.]+): (\d+)$", RECORDED.read_text(), re.M)}


def _fake_ethtool(tmp_path: Path) -> Path:
    """Stands in for the ethtool binary (no E810 here): ``-i`` says nothing of the driver (sysfs must),
    ``-S`` replays the recording."""
    script = tmp_path / "ethtool"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "-S" ]; then cat {RECORDED}; else echo "version: 1.13.7"; fi\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_agent_reads_the_e810_port_counters_and_pfc_per_priority(tmp_path: Path) -> None:
    recv = Receiver().start()
    try:
        cfg = parse_config({"host": "node07", "sink": {"url": recv.url, "flush_interval_s": 0.05},
                            "nic": {"ethtool": "subprocess", "ethtool_binary": str(_fake_ethtool(tmp_path)),
                                    "exclude": []},
                            "rdma": {"enabled": False}, "storage": {"enabled": False}, "gpu": {"enabled": False},
                            "tcp": {"enabled": False}, "pressure": {"enabled": False, "thermal": False},
                            "paths": {"sys_root": str(CASE / "sys")}})
        sink = sink_from_config(cfg.sink)
        try:
            agent = Agent(cfg, sink)
            nic = next(c for _, c in agent.tasks if isinstance(c, NicCollector))
            agent.run_collector(nic)
            assert sink.flush(15.0)
        finally:
            sink.close()
        got = {(s["metric"], tuple(sorted(s.get("labels", {}).items()))): s["value"] for s in recv.items("samples")
               if s["source"] == "node07:ens1f0"}
    finally:
        recv.stop()
    keys = _keys()
    assert nic.sysfs_driver("ens1f0") == "ice"
    # Byte totals are the port's own counters, not the VSI's, not their sum, not the queues' sum.
    assert got[("rx_bytes_total", ())] == keys["rx_bytes.nic"] == 848_255_752
    assert got[("tx_bytes_total", ())] == keys["tx_bytes.nic"] == 74_057_390_445
    queue_sum = sum(v for k, v in keys.items() if re.fullmatch(r"rx_queue_\d+_bytes", k))
    assert got[("rx_bytes_total", ())] not in (keys["rx_bytes"], keys["rx_bytes"] + keys["rx_bytes.nic"], queue_sum)
    # PFC: xoff received and sent for each of the 8 priorities.
    for direction in ("rx", "tx"):
        for prio in range(8):
            key = (f"{direction}_pause_frames_total", (("priority", str(prio)),))
            assert got[key] == keys[f"{direction}_priority_{prio}_xoff.nic"]
    # The driver came from sysfs: nothing guessed, nothing dropped.
    assert selfmetrics.REGISTRY is None or selfmetrics.REGISTRY.get_sample_value(
        "fabricscope_collector_parse_problems_total", {"device": "node07:ens1f0", "format": "ethtool-S"}) is None


def test_a_driver_sysfs_does_not_name_is_sniffed_and_said(tmp_path: Path, caplog) -> None:
    """Without the sysfs link the agent sniffs the driver from distinctive keys, logs the guess once with
    the device named, and counts it in /metrics on every poll."""
    import shutil

    shutil.copytree(CASE / "sys", tmp_path / "sys", symlinks=True)
    (tmp_path / "sys/class/net/ens1f0/device").unlink()
    from fabricscope.collectors.host.nic import SubprocessEthtool

    col = NicCollector("node08", sys_root=tmp_path / "sys", exclude=(), ethtool=SubprocessEthtool(
        str(_fake_ethtool(tmp_path))))
    with caplog.at_level("WARNING"):
        first, _second = col.poll(), col.poll()
    by = {(s.metric, tuple(sorted((s.labels or {}).items()))): s.value for s in first}
    assert by[("rx_bytes_total", ())] == 848_255_752
    logged = [r.getMessage() for r in caplog.records if "node08:ens1f0" in r.getMessage()]
    assert len(logged) == 1 and "driver sniffed as ice" in logged[0]
    if selfmetrics.REGISTRY is not None:
        assert selfmetrics.REGISTRY.get_sample_value(
            "fabricscope_collector_parse_problems_total", {"device": "node08:ens1f0", "format": "ethtool-S"}) == 2.0
    col.close()
