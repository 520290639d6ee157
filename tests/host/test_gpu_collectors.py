"""The GPU collectors: NVML (through an injected library object that replays the H200 readings of
tests/fixtures/gpu/h200-device/report.json, since this machine has no GPU), the real ``pynvml``
where it is installed but no driver is (this machine), the dcgm-exporter scrape over real HTTP, the
agent's ``gpu:`` section, and ``fabricscope parse`` on the recorded outputs."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fabricscope.collectors.host.agent import Agent
from fabricscope.collectors.host.config import parse_config
from fabricscope.collectors.host.gpu import DcgmCollector, NvmlCollector, load_nvml, parse_dcgm
from fabricscope.collectors.host.gpu.maps import THROTTLE_BITS
from fabricscope.core.errors import CollectionError, ConfigError
from fabricscope.core.model import Event

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests/fixtures/gpu"
H200 = json.loads((GPU / "h200-device/report.json").read_text())["nvml"]
DCGM_TEXT = (GPU / "rtx4000ada-dcgm-exporter-lke/metrics.txt").read_text()


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """pynvml's names and constants; one H200 at index 0 with the recorded readings, a second
    GPU without NVLink/ECC support. Records every call so tests see what was (not) retried."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_TIMEOUT, NVML_ERROR_LIBRARY_NOT_FOUND = 3, 10, 12
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1
    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    NVML_NVLINK_MAX_LINKS, NVML_FEATURE_ENABLED = 18, 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, *, throttle: int = H200["throttle_reasons"], xids: tuple[int, ...] = ()) -> None:
        self.calls: list[str] = []
        self.throttle = throttle
        self.pending = [SimpleNamespace(device="h0", eventData=x) for x in xids]
        self.waits: list[int] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name[4:5].isupper():
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 2
    def nvmlDeviceGetHandleByIndex(self, i: int) -> str: return f"h{i}"
    def nvmlDeviceGetIndex(self, h: str) -> int: return int(h[1:])

    def _only_h0(self, h: str) -> None:
        if h != "h0":
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return H200["sm_clock_mhz"] if clock == self.NVML_CLOCK_SM else H200["mem_clock_mhz"]

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int: return 1980
    def nvmlDeviceGetPowerUsage(self, h: str) -> int: return round(H200["power_w"] * 1000)
    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int: return H200["temp_c"]
    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any: return SimpleNamespace(gpu=87, memory=41)
    def nvmlDeviceGetPcieReplayCounter(self, h: str) -> int: return H200["pcie_replay"]
    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int: return H200["pcie_gen"][0]
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: str) -> int: return H200["pcie_gen"][1]
    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int: return H200["pcie_width"][0]
    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int: return H200["pcie_width"][1]
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int: return self.throttle

    def nvmlDeviceGetTotalEccErrors(self, h: str, err: int, counter: int) -> int:
        self._only_h0(h)
        return 10 * err + counter  # distinct per (type, scope): the labels must follow the args

    def nvmlDeviceGetRetiredPages(self, h: str, cause: int) -> list[int]:
        self._only_h0(h)
        return [0x1000] * (cause + 2)

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        self._only_h0(h)
        return (3, 1, 0, 0)

    def nvmlDeviceGetNvLinkState(self, h: str, link: int) -> int:
        self._only_h0(h)
        if link >= 2:
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT: past the last link
        return 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h: str, link: int, counter: int) -> int:
        return 100 * link + counter

    def nvmlEventSetCreate(self) -> str: return "set"
    def nvmlEventSetFree(self, s: str) -> None: ...
    def nvmlDeviceRegisterEvents(self, h: str, kinds: int, s: str) -> None: ...

    def nvmlEventSetWait(self, s: str, timeout_ms: int) -> Any:
        self.waits.append(timeout_ms)
        if not self.pending:
            raise NVMLError(self.NVML_ERROR_TIMEOUT)
        return self.pending.pop(0)


def _by_key(samples: list[Any]) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], float]:
    return {(s.source, s.metric, tuple(sorted((s.labels or {}).items()))): s.value for s in samples}


def test_nvml_maps_the_recorded_h200_readings_onto_canonical_metrics() -> None:
    col = NvmlCollector.open("node", FakeNvml(throttle=0x04 | 0x40))
    assert col is not None
    got = _by_key(col.poll())
    g0 = "node:gpu0"
    assert got[(g0, "gpu_sm_clock_hz", ())] == 1980e6
    assert got[(g0, "gpu_memory_clock_hz", ())] == 3201e6
    assert got[(g0, "gpu_power_watts", ())] == pytest.approx(124.279)
    assert got[(g0, "gpu_temperature_celsius", ())] == 40
    assert got[(g0, "gpu_utilization_ratio", ())] == pytest.approx(0.87)
    assert got[(g0, "gpu_memory_utilization_ratio", ())] == pytest.approx(0.41)
    assert got[(g0, "pcie_link_generation", ())] == 5 and got[(g0, "pcie_link_width_max", ())] == 16
    active = {dict(k[2])["reason"]: v for k, v in got.items() if k[0] == g0 and k[1] == "gpu_throttle_active"}
    assert active == {r: (1.0 if r in ("power_cap", "hw_thermal") else 0.0) for r in THROTTLE_BITS.values()}
    ecc = {k[2]: v for k, v in got.items() if k[0] == g0 and k[1] == "gpu_ecc_errors_total"}
    assert ecc == {(("scope", "volatile"), ("type", "corrected")): 0,
                   (("scope", "aggregate"), ("type", "corrected")): 1,
                   (("scope", "volatile"), ("type", "uncorrected")): 10,
                   (("scope", "aggregate"), ("type", "uncorrected")): 11}
    assert got[(g0, "gpu_retired_pages_total", (("cause", "double_bit_ecc"),))] == 3
    assert got[(g0, "gpu_remapped_rows_total", (("cause", "correctable"),))] == 3
    nvl = {k[2]: v for k, v in got.items() if k[1] == "gpu_nvlink_errors_total"}
    assert len(nvl) == 8, "links 0 and 1, four counters each; link 2 does not exist"
    assert nvl[(("link", "1"), ("type", "crc_flit"))] == 102


def test_nvml_unsupported_fields_are_absent_and_not_asked_again() -> None:
    lib = FakeNvml()
    col = NvmlCollector.open("node", lib)
    assert col is not None
    first = col.poll()
    g1 = {s.metric for s in first if s.source == "node:gpu1"}
    assert "gpu_sm_clock_hz" in g1
    assert not g1 & {"gpu_ecc_errors_total", "gpu_nvlink_errors_total", "gpu_remapped_rows_total"}
    lib.calls.clear()
    col.poll()
    assert lib.calls.count("nvmlDeviceGetTotalEccErrors") == 4, "GPU 0 only: GPU 1's NOT_SUPPORTED is cached"
    assert lib.calls.count("nvmlDeviceGetRemappedRows") == 1


def test_nvml_xid_events_are_drained_without_blocking() -> None:
    lib, seen = FakeNvml(xids=(79, 48)), list[Event]()
    col = NvmlCollector.open("node", lib, emit=seen.append)
    assert col is not None
    col.poll()
    assert [(e.kind, e.source, dict(e.attrs)) for e in seen] == [
        ("gpu_xid", "node:gpu0", {"code": 79}), ("gpu_xid", "node:gpu0", {"code": 48})]
    assert lib.waits and set(lib.waits) == {0}, "the event set is polled with a zero timeout"
    col.poll()
    assert len(seen) == 2


def test_real_pynvml_without_a_driver_disables_the_collector_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    lib = load_nvml()
    assert lib is not None and lib.__name__ == "pynvml", "nvidia-ml-py is in the test extra"
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")  # this one has no GPU
    with caplog.at_level(logging.INFO, logger="fabricscope.agent.gpu"):
        assert NvmlCollector.open("node", lib) is None
    assert any("NVML unavailable" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_absent_bindings_disable_the_collector_with_one_info_line(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` sees where it is not installed
    with caplog.at_level(logging.INFO, logger="fabricscope.agent.gpu"):
        assert NvmlCollector.open("node") is None
    lines = [r for r in caplog.records if r.name == "fabricscope.agent.gpu"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and "not installed" in lines[0].getMessage()


# -- dcgm-exporter --------------------------------------------------------------------------------
def _line(field: str, value: str) -> str:
    """The recorded XID line of the RTX 4000 Ada scrape with another field name and value."""
    xid = next(ln for ln in DCGM_TEXT.splitlines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    return field + xid[len("DCGM_FI_DEV_XID_ERRORS"):].rsplit(" ", 1)[0] + " " + value + "\n"


def test_dcgm_bitmask_nvlink_blank_and_mig_rows() -> None:
    text = (_line("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "8")
            + _line("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "5")
            + _line("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L3", "2")
            + _line("DCGM_FI_DEV_GPU_TEMP", "9223372036854775794")  # DCGM's blank, as in its README
            + _line("DCGM_FI_DEV_SM_CLOCK", "1410").replace('gpu="0"', 'gpu="0",GPU_I_ID="3"'))
    got = _by_key(parse_dcgm(text, 1.0, "node").samples)
    assert got[("node:gpu0", "gpu_throttle_active", (("reason", "hw_slowdown"),))] == 1.0
    assert got[("node:gpu0", "gpu_throttle_active", (("reason", "power_cap"),))] == 0.0
    assert got[("node:gpu0", "gpu_nvlink_errors_total", (("link", "all"), ("type", "crc_flit")))] == 5
    assert got[("node:gpu0", "gpu_nvlink_errors_total", (("link", "3"), ("type", "replay")))] == 2
    assert not any(k[1] == "gpu_temperature_celsius" for k in got), "blank"
    # No device row of the SM clock: the GPU's value is kept from its MIG instance's row (#43).
    assert got[("node:gpu0", "gpu_sm_clock_hz", ())] == 1410e6


@pytest.fixture
def exporter() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server that answers each GET with the next body of ``bodies``."""
    bodies: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = (bodies.pop(0) if len(bodies) > 1 else bodies[0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a: Any) -> None: ...

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", bodies
    finally:
        srv.shutdown()
        srv.server_close()


def test_dcgm_collector_scrapes_and_emits_an_xid_when_the_last_xid_changes(exporter: Any) -> None:
    url, bodies = exporter
    xid79 = DCGM_TEXT.replace(_line("DCGM_FI_DEV_XID_ERRORS", "0"), _line("DCGM_FI_DEV_XID_ERRORS", "79"))
    assert xid79 != DCGM_TEXT
    bodies += [DCGM_TEXT, xid79, xid79]
    seen: list[Event] = []
    col = DcgmCollector("node", url, emit=seen.append)
    samples = col.poll()
    assert {s.metric for s in samples} >= {"gpu_sm_clock_hz", "gpu_power_watts", "pcie_replays_total"}
    assert seen == []
    col.poll()
    assert [(e.kind, e.source, dict(e.attrs)) for e in seen] == [("gpu_xid", "node:gpu0", {"code": 79})]
    col.poll()
    assert len(seen) == 1, "the same last-XID on the next scrape is not a new event"


def test_dcgm_collector_unreachable_is_a_collection_error() -> None:
    with pytest.raises(CollectionError, match="dcgm-exporter"):
        DcgmCollector("node", "http://127.0.0.1:9/metrics", timeout_s=1).poll()


# -- the agent ------------------------------------------------------------------------------------
class ListSink:
    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []

    def submit(self, kind: str, item: dict[str, Any]) -> bool:
        self.items.append((kind, item))
        return True


def _cfg(**gpu: Any) -> Any:
    return parse_config({"host": "node", "sink": {"url": "http://127.0.0.1:9"}, "nic": {"enabled": False},
                         "rdma": {"enabled": False}, "storage": {"enabled": False}, "gpu": gpu,
                         "tcp": {"enabled": False}, "pressure": {"enabled": False}})  # on by default since #17 item 2


def test_agent_runs_the_gpu_collector_and_ships_its_samples_and_xids() -> None:
    sink = ListSink()
    agent = Agent(_cfg(interval_s=2), sink, nvml_lib=FakeNvml(xids=(63,)))  # type: ignore[arg-type]
    assert [(i, c.name) for i, c in agent.tasks] == [(2.0, "gpu")]
    agent.run_once()
    metrics = {item["metric"] for kind, item in sink.items if kind == "samples"}
    assert {"gpu_sm_clock_hz", "gpu_throttle_active", "pcie_replays_total"} <= metrics
    events = [item for kind, item in sink.items if kind == "events"]
    assert events == [{"kind": "gpu_xid", "source": "node:gpu0", "start": events[0]["start"], "attrs": {"code": 63}}]
    assert agent.stats["events"] == 1


def test_agent_without_a_gpu_driver_starts_without_the_collector() -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    agent = Agent(_cfg(), ListSink())  # type: ignore[arg-type]  # the real pynvml, no driver here
    assert agent.tasks == []


def test_agent_dcgm_source_scrapes_the_configured_url(exporter: Any) -> None:
    url, bodies = exporter
    bodies.append(DCGM_TEXT)
    sink = ListSink()
    agent = Agent(_cfg(source="dcgm", dcgm_url=url), sink)  # type: ignore[arg-type]
    agent.run_once()
    assert ("node:gpu0", "gpu_sm_clock_hz", 2310e6) in {(i["source"], i["metric"], i["value"]) for _, i in sink.items}


@pytest.mark.parametrize(("gpu", "message"), [
    ({"source": "nvidia-smi"}, "gpu.source"),
    ({"interval_s": 0}, "gpu.interval_s"),
    ({"dcgm": "x"}, "gpu.dcgm"),
])
def test_gpu_config_errors_name_the_field(gpu: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(**gpu)


# -- fabricscope parse ----------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "fmt"), [
    ("h200-device/nvidia-smi-q-x.xml", "nvidia-smi-xml"),
    ("tesla-t4-telegraf/nvidia-smi-q-x.xml", "nvidia-smi-xml"),
    ("asus-esc8000a-4gpu-4nic-stelline/nvidia-smi-topo-m.txt", "nvidia-smi-topo"),
    ("rtx4000ada-dcgm-exporter-lke/metrics.txt", "dcgm-exporter"),
])
def test_fabricscope_parse_sniffs_and_reads_the_recorded_outputs(path: str, fmt: str) -> None:
    run = subprocess.run([sys.executable, "-m", "fabricscope", "parse", str(GPU / path), "-d", "node", "--ts", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stderr.split("summary ", 1)[1])
    assert summary["format"] == fmt and summary["samples"] > 0
    first = json.loads(run.stdout.splitlines()[0])
    assert first["kind"] == "sample" and first["source"].startswith("node:gpu")


def test_fabricscope_parse_dcgm_xid_is_an_event(tmp_path: Path) -> None:
    raw = tmp_path / "metrics.txt"
    raw.write_text(DCGM_TEXT.replace(_line("DCGM_FI_DEV_XID_ERRORS", "0"), _line("DCGM_FI_DEV_XID_ERRORS", "31")))
    run = subprocess.run([sys.executable, "-m", "fabricscope", "parse", str(raw), "-d", "node", "--ts", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    events = [row for ln in run.stdout.splitlines() if "attrs" in (row := json.loads(ln))]
    assert [(e["source"], e["start"], e["attrs"]) for e in events] == [("node:gpu0", 1.0, {"code": 31})]


def test_agent_smi_source_runs_nvidia_smi_and_maps_its_xml(tmp_path: Path) -> None:
    """A stand-in ``nvidia-smi`` (this machine has none) that prints the recorded T4 XML."""
    fake = tmp_path / "nvidia-smi"
    xml = GPU / "tesla-t4-telegraf/nvidia-smi-q-x.xml"
    fake.write_text(f'#!/bin/sh\n[ "$1 $2" = "-q -x" ] || exit 64\nexec cat {xml}\n')
    fake.chmod(0o755)
    sink = ListSink()
    agent = Agent(_cfg(source="smi", smi_binary=str(fake)), sink)  # type: ignore[arg-type]
    agent.run_once()
    got = {(i["source"], i["metric"]): i["value"] for _, i in sink.items if "labels" not in i}
    assert got[("node:gpu0", "pcie_link_width")] == 8 and got[("node:gpu0", "pcie_link_width_max")] == 16
    broken = Agent(_cfg(source="smi", smi_binary=str(tmp_path / "absent")), ListSink())  # type: ignore[arg-type]
    broken.run_once()
    assert broken.stats["errors"] == 1, "a missing nvidia-smi is a failed poll, not a crash"
