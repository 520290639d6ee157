"""The demo's fabric acceptance: a recorded nccl-tests run imported as the baseline of the simulated
fabric, and what the simulated job achieves against it while a network fault is active.

The recording (data/, origin in data/SOURCES.md) is parsed by the nccl-tests importer and posted
to ``POST /v1/acceptance/runs`` like ``fabricscope import nccl-tests`` does. The simulated ring then
runs at the busbw that run measured at the job's largest bucket: the simulated fabric is the one
that passed this acceptance test. What the job achieves is ``GET /v1/jobs/{job}/efficiency``: each
collective's own time, from the last rank's arrival to its completion (the wait for the last rank
is the straggler's, not the fabric's). The healthy job still reads below 1 where the simulated
64-rank ring pays its hop latency (2(n-1) x 8 us, about 1 ms an all-reduce) that the recorded 8-rank
run, the nearest smaller rank count, does not: 0.80 at 512 MiB and 0.68 at 256 MiB.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from fabricscope.collectors.training.importers.nccl_tests import parse
from fabricscope.core.busbw import size_bucket
from fabricscope.service.simulate.faults import Fault
from fabricscope.service.simulate.generator import Scenario
from fabricscope.service.simulate.model import JobSpec

RECORDING = Path(__file__).resolve().parent / "data" / "all_reduce_perf-a100-8gpu-superbench.txt"
FABRIC = "demo-fabric"
NETWORK_LAYERS = ("nic", "link", "fabric")


def load_run(path: Path = RECORDING) -> dict[str, Any]:
    """The recording as the acceptance-run body (fabric and labels added, as the CLI adds them)."""
    (run,) = parse(path.read_text(), source=path.name)
    return {**run, "fabric": FABRIC, "labels": {"source": "fabricscope demo"}}


def baseline_gbps(run: dict[str, Any], size: int) -> float:
    """The run's out-of-place busbw in the bucket of ``size``."""
    b = size_bucket(size)
    rows = [r["busbw_gbps"] for r in run["rows"]
            if r["placement"] == "out_of_place" and size_bucket(r["size_bytes"]) == b]
    if not rows:
        raise ValueError(f"the recording has no out-of-place row of {size} bytes")
    return float(max(rows))


def job_spec_for(run: dict[str, Any], spec: JobSpec | None = None) -> JobSpec:
    """The simulator's job on the accepted fabric: its ring at the busbw of the largest bucket."""
    spec = spec or JobSpec()
    return replace(spec, bus_bw_Bps=baseline_gbps(run, max(spec.bucket_bytes)) * 1e9)


def post_run(client: httpx.Client, run: dict[str, Any]) -> int:
    r = client.post("/v1/acceptance/runs", json=run)
    r.raise_for_status()
    return int(r.json()["id"])


def _window(sc: Scenario, first: int, last: int) -> tuple[float, float]:
    tl = sc.timeline
    return float(tl.start[first].min()) + sc.t0 - 1.0, float(tl.end[last].max()) + sc.t0 + 1.0


def _fractions(client: httpx.Client, job: str, window: tuple[float, float] | None) -> dict[int, dict[str, Any]]:
    params: dict[str, Any] = {"fabric": FABRIC}
    if window is not None:
        from datetime import UTC, datetime

        params["from"], params["to"] = (datetime.fromtimestamp(t, UTC).isoformat() for t in window)
    r = client.get(f"/v1/jobs/{job}/efficiency", params=params)
    r.raise_for_status()
    return {row["bucket"]: row for row in r.json()["rows"] if row["op"] == "all_reduce"}


def _longest_healthy(sc: Scenario) -> tuple[int, int] | None:
    """The longest run of steps without any injected fault (step 0, the warm-up, left out)."""
    faulty = {s for f in sc.faults for s in range(f.start_step, f.start_step + f.steps)}
    best: tuple[int, int] | None = None
    start = None
    for s in range(1, len(sc.timeline.start) + 1):
        if s < len(sc.timeline.start) and s not in faulty:
            start = s if start is None else start
        elif start is not None:
            if best is None or s - 1 - start > best[1] - best[0]:
                best = (start, s - 1)
            start = None
    return best


def network_fault(sc: Scenario) -> Fault | None:
    return next((f for f in sc.faults if f.layer in NETWORK_LAYERS), None)


def efficiency_block(client: httpx.Client, sc: Scenario, run: dict[str, Any]) -> str:
    """A few lines: per bucket the baseline, the fraction on healthy steps and during a network fault."""
    fault = network_fault(sc)
    run_ok = _longest_healthy(sc)
    ok = _fractions(client, sc.job, _window(sc, *run_ok) if run_ok else None)
    bad = _fractions(client, sc.job, _window(sc, fault.start_step, fault.start_step + fault.steps - 1)) if fault \
        else {}
    dev = run["devices"][0]["name"] if run.get("devices") else "?"
    nccl = run.get("versions", {}).get("nccl")
    head = (f"bus bandwidth vs acceptance (fabric {FABRIC}: {run['source']}, {run['ranks']} ranks, {dev}"
            f"{f', NCCL {nccl}' if nccl else ''}); each collective's own time, from the last rank's arrival:")
    during = f"{fault.kind} {fault.component} (steps {fault.start_step}-{fault.start_step + fault.steps - 1})" \
        if fault else "no network fault injected"
    lines = [head, f"{'all_reduce':>12} {'baseline':>10} {'healthy':>8}  during {during}"]
    for bucket in sorted(ok):
        row = ok[bucket]
        base = row["baseline_busbw_gbps"]
        frac = row["fraction"]
        during_f = bad.get(bucket, {}).get("fraction")
        lines.append(f"{bucket / 2**20:>8.0f} MiB {base or 0:>6.1f} GB/s {frac or 0:>8.2f}  "
                     f"{'-' if during_f is None else f'{during_f:.2f}'}")
    scale = next((r["scale"] for r in ok.values() if r.get("scale")), None)
    if scale == "nearest_smaller":
        lines.append(f"(the baseline's {run['ranks']} ranks: the nearest smaller rank count measured)")
    return "\n".join(lines)
