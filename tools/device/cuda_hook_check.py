"""One short check on a GPU machine: the training hook's CUDA-event path and what NVML reports.

Run from the repository root on a machine with one CUDA GPU and torch (no fabricscope extras):
``PYTHONPATH=. python3 tools/device/cuda_hook_check.py OUTDIR``. It starts a local HTTP receiver,
runs a one-rank NCCL job whose all-reduces the hook times with CUDA events, compares those times
with CUDA events taken around the same calls, measures the hook's cost per collective, and records
``nvidia-smi -q -x`` / ``topo -m`` and the GPU's sysfs PCIe attributes as fixtures for later parsers.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from receiver import start_receiver  # tools/device/receiver.py, beside this script

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
OUT.mkdir(parents=True, exist_ok=True)


def record(cmd: list[str], name: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        (OUT / name).write_text(r.stdout if r.returncode == 0 else f"# exit {r.returncode}\n{r.stderr}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        (OUT / name).write_text(f"# failed: {exc}\n")


def sysfs_pci(bus_id: str) -> dict[str, str]:
    dev = Path("/sys/bus/pci/devices") / bus_id.lower().replace("00000000:", "0000:")
    attrs = {}
    for a in (
        "numa_node",
        "local_cpulist",
        "current_link_speed",
        "current_link_width",
        "max_link_speed",
        "max_link_width",
        "class",
        "vendor",
        "device",
    ):
        try:
            attrs[a] = (dev / a).read_text().strip()
        except OSError as exc:
            attrs[a] = f"unreadable: {exc.strerror}"
    with contextlib.suppress(OSError):
        attrs["resolved"] = str(dev.resolve())
    return attrs


def main() -> None:
    import torch
    import torch.distributed as dist

    url, received = start_receiver()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", WORLD_SIZE="1")
    from fabricscope.training import Recorder

    report: dict[str, object] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    }
    rec = Recorder(url=url, job="gpu-hook-check", rank=0, spool=OUT / "spool").start()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    x = torch.randn(16 * 1024 * 1024, device="cuda")  # 64 MiB
    a = torch.randn(4096, 4096, device="cuda")
    outer: list[float] = []
    for step in range(30):
        with rec.step(step):
            with rec.phase("compute"):
                for _ in range(4):
                    a = (a @ a).tanh_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            dist.all_reduce(x)
            e.record()
            work = dist.all_reduce(x, async_op=True)
            work.wait()
            torch.cuda.synchronize()
            outer.append(s.elapsed_time(e) / 1e3)
    rec.flush(10)
    report["stats"] = dict(rec.stats)
    # cost per collective: the same all-reduce of 4 KiB with the hook on and off, alternated
    small = torch.ones(1024, device="cuda")

    def timed(n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(small)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    on, off = [], []
    for _ in range(5):
        on.append(timed(2000))
        rec.collectives_on = False
        off.append(timed(2000))
        rec.collectives_on = True
    rec.close(10)
    dist.destroy_process_group()
    steps = received.get("steps", [])
    colls = [c for c in received.get("collectives", []) if c.get("op") == "all_reduce" and c.get("bytes") == 64 << 20]
    durs = [c["end"] - c["start"] for c in colls if "end" in c and "start" in c]
    report.update(
        steps_received=len(steps),
        collectives_received=len(received.get("collectives", [])),
        big_all_reduces=len(colls),
        hook_median_s=statistics.median(durs) if durs else None,
        cuda_event_median_s=statistics.median(outer),
        timing_fields=sorted(colls[0]) if colls else None,
        hook_cost_us_per_collective=(statistics.median(on) - statistics.median(off)) * 1e6,
        allreduce_4k_us_on=statistics.median(on) * 1e6,
        allreduce_4k_us_off=statistics.median(off) * 1e6,
        example_step=steps[-1] if steps else None,
        example_collective=colls[-1] if colls else None,
    )
    try:
        import pynvml as nv

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        report["nvml"] = {
            "driver": nv.nvmlSystemGetDriverVersion(),
            "bus_id": bus,
            "sm_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "throttle_reasons": nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
            "temp_c": nv.nvmlDeviceGetTemperature(h, 0),
            "pcie_gen": [nv.nvmlDeviceGetCurrPcieLinkGeneration(h), nv.nvmlDeviceGetMaxPcieLinkGeneration(h)],
            "pcie_width": [nv.nvmlDeviceGetCurrPcieLinkWidth(h), nv.nvmlDeviceGetMaxPcieLinkWidth(h)],
            "pcie_replay": nv.nvmlDeviceGetPcieReplayCounter(h),
        }
        report["sysfs"] = sysfs_pci(bus)
    except Exception as exc:  # a report line, not a crash: the rest of the check stands
        report["nvml_error"] = repr(exc)
    record(["nvidia-smi", "-q", "-x"], "nvidia-smi-q-x.xml")
    record(["nvidia-smi", "topo", "-m"], "nvidia-smi-topo-m.txt")
    record(["cat", "/proc/pressure/cpu", "/proc/pressure/io", "/proc/pressure/memory"], "proc-pressure.txt")
    record(["cat", "/proc/net/netstat"], "proc-net-netstat.txt")
    (OUT / "report.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
