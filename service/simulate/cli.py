"""`fabricscope simulate`: generate a leaf–spine cluster running a data-parallel job with injected
faults and send everything through the real ingest API. The lead registers `simulate_command`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer

from fabricscope.service.simulate.faults import FAULT_KINDS, kinds_for
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.send import HttpSink, send_scenario
from fabricscope.service.simulate.topology import ClusterSpec
from fabricscope.service.simulate.variation import Variation


def simulate_command(
    url: str = typer.Option("http://127.0.0.1:8080", help="Base URL of the fabricscope API"),
    job: str = typer.Option("sim-job", help="Job name"),
    hosts: int = typer.Option(8, min=1),
    leaves: int = typer.Option(2, min=1),
    spines: int = typer.Option(2, min=1),
    gpus_per_host: int = typer.Option(8, "--gpus-per-host", min=1),
    nics_per_host: int = typer.Option(8, "--nics-per-host", min=1),
    steps: int = typer.Option(80, min=2),
    faults: int = typer.Option(4, min=0, help="Number of random faults to inject (0 = fault-free)"),
    kinds: str = typer.Option("", help=f"Comma list of fault kinds to draw from: {', '.join(FAULT_KINDS)}"),
    seed: int = typer.Option(0),
    interval: float = typer.Option(2.0, help="Counter sampling interval, seconds"),
    skew: float = typer.Option(0.05, help="Max clock skew between hosts, seconds"),
    live: bool = typer.Option(True, help="Place the run so it ends now (otherwise a fixed past time)"),
    token: str = typer.Option("", envvar="FABRICSCOPE_TOKEN", help="Bearer token with the ingest scope"),
    truth: Path | None = typer.Option(None, help="Write the injected faults and per-step ground truth here"),
    fabric: str = typer.Option("roce", help="roce (PFC, ECN, egress queues) or ib (InfiniBand: credits, HCAs)"),
    robust: bool = typer.Option(False, help="Draw names, per-collector sampling (1-10 s), skew, missing series, "
                                            "counter starts and noise from the seed (#15)"),
) -> None:
    """Simulate a cluster and a training job with faults, sending it all through the ingest API."""
    kind_list = [k.strip() for k in kinds.split(",") if k.strip()] or None
    for k in kind_list or []:
        if k not in FAULT_KINDS:
            raise typer.BadParameter(f"unknown fault kind {k!r}; known: {', '.join(FAULT_KINDS)}", param_hint="--kinds")
    try:
        spec = ClusterSpec(hosts=hosts, gpus_per_host=gpus_per_host, nics_per_host=nics_per_host,
                           leaves=leaves, spines=spines, fabric=fabric, names=seed if robust else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if kind_list and faults and not kinds_for(fabric, kind_list):
        raise typer.BadParameter(f"none of these kinds happens on a {fabric} fabric", param_hint="--kinds")
    variation = Variation.draw(np.random.default_rng([seed, 1515])) if robust else None
    sc = generate(spec, job=job, steps=steps, faults=faults, seed=seed, interval=interval, skew_s=skew,
                  kinds=kind_list, variation=variation)
    if live:  # shift so the last step ends now
        sc.t0 = time.time() - float(sc.timeline.end.max()) - 2 * interval
    typer.echo(f"cluster: {hosts} hosts x {gpus_per_host} GPUs = {sc.cluster.ranks} ranks, "
               f"{len(sc.cluster.nics)} NICs, {leaves} leaves, {spines} spines; {steps} steps")
    for f in sc.faults:
        typer.echo(f"  fault {f.kind:18s} {f.component:22s} steps {f.start_step}-{f.start_step + f.steps - 1} "
                   f"severity {f.severity:.2f}")
    sink = HttpSink(url, token=token or None)
    try:
        counts = send_scenario(sink, sc)
    finally:
        sink.close()
    typer.echo(f"sent to {url}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if truth:
        truth.write_text(json.dumps({
            "job": job, "faults": [f.to_json() for f in sc.faults],
            "steps": [{"step": t.step, "slow": t.slow, "delay_s": t.delay_s, "layer": t.layer,
                       "component": t.component, "causes": t.causes} for t in sc.truth.values()]}, indent=1))
        typer.echo(f"ground truth written to {truth}")
