"""The ``tcp:`` and ``pressure:`` config blocks and the agent running those collectors over recorded
``/proc`` and ``/sys`` trees, shipping to a real HTTP receiver."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricscope.collectors.host.agent import Agent, sink_from_config
from fabricscope.collectors.host.config import parse_config
from fabricscope.collectors.host.pressure import PressureCollector, cgroup2_root
from fabricscope.collectors.host.tcp import TcpCollector
from fabricscope.core.errors import ConfigError
from tests.sinks.receiver import Receiver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host"
SINK = {"url": "http://127.0.0.1:8000"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sink": SINK, "tcp": {"intreval_s": 1}}, "tcp.intreval_s: unknown field"),
        ({"sink": SINK, "pressure": {"interval_s": 0}}, "pressure.interval_s: must be > 0"),
        ({"sink": SINK, "pressure": {"cgroups": "job_*"}}, "pressure.cgroups: expected a list"),
        ({"sink": SINK, "pressure": {"thermal": "yes"}}, "pressure.thermal: expected true or false"),
    ],
)
def test_config_errors_name_the_field(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value).startswith(message)


def test_agent_schedules_the_collectors_as_configured() -> None:
    cfg = parse_config({"sink": SINK, "nic": {"enabled": False}, "rdma": {"enabled": False},
                        "storage": {"enabled": False}, "gpu": {"enabled": False},
                        "tcp": {"interval_s": 2, "softnet": False},
                        "pressure": {"interval_s": 0.5, "cgroups": ["job_*"], "cgroup_root": "/x",
                                     "thermal_interval_s": 10}})
    agent = Agent(cfg, sink_from_config(cfg.sink))
    (ti, tcp), (pi, pressure) = agent.tasks
    assert isinstance(tcp, TcpCollector) and ti == 2 and not tcp.softnet
    assert isinstance(pressure, PressureCollector) and pi == 0.5
    assert pressure.thermal_every == 20 and pressure.cgroup_root == Path("/x") and pressure.cgroups == ("job_*",)
    off = parse_config({"sink": SINK, "gpu": {"enabled": False}, "tcp": {"enabled": False},
                        "pressure": {"enabled": False, "thermal": False}})
    assert {c.name for _, c in Agent(off, sink_from_config(off.sink)).tasks} == {"nic", "rdma", "storage"}


def test_cgroup2_root_from_mounts(tmp_path: Path) -> None:
    (tmp_path / "mounts").write_text(  # this VM's hybrid layout (lines of its /proc/mounts)
        "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
        "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    assert cgroup2_root(tmp_path, Path("/sys")) == Path("/sys/fs/cgroup/unified")
    assert cgroup2_root(tmp_path, Path("/host/sys")) == Path("/host/sys/fs/cgroup/unified")
    (tmp_path / "mounts").write_text("proc /proc proc rw 0 0\n")
    assert cgroup2_root(tmp_path, Path("/sys")) == Path("/sys/fs/cgroup")


def test_agent_ships_tcp_and_pressure_samples() -> None:
    case = FIXTURES / "procfs-fixtures"
    recv = Receiver().start()
    try:
        cfg = parse_config({"host": "node07", "sink": {"url": recv.url, "flush_interval_s": 0.05},
                            "nic": {"enabled": False}, "rdma": {"enabled": False}, "storage": {"enabled": False},
                            "gpu": {"enabled": False},
                            "paths": {"proc_root": str(case / "proc"), "sys_root": str(case / "sys")}})
        sink = sink_from_config(cfg.sink)
        try:
            Agent(cfg, sink).run_once()
            assert sink.flush(15.0)
        finally:
            sink.close()
        got = {(s["metric"], tuple(sorted(s.get("labels", {}).items()))): s["value"] for s in recv.items("samples")
               if s["source"] == "node07"}
    finally:
        recv.stop()
    assert got[("tcp_retransmitted_segments_total", ())] == 348.0
    assert got[("softnet_dropped_total", ())] == 161088.0
    assert got[("io_pressure_seconds_total", (("level", "full"),))] == 25e-6
    assert got[("cpu_thermal_throttle_total", (("scope", "package"),))] == 34818.0
