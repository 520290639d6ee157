"""`fabricscope demo` — the main job of `make run`: the API on the embedded database, fed by the
cluster simulator (when no collectors are configured), then the slow steps it found and why."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fabricscope.service.settings import get_settings

if TYPE_CHECKING:
    from fabricscope.service.correlate import AttributionEngine


def _serve_in_thread(host: str, port: int) -> tuple[Any, threading.Thread, AttributionEngine]:
    """The running server, its thread, and the app's attribution engine (the report shares its caches)."""
    from fabricscope.service.api.main import create_app
    from fabricscope.service.api.server import make_server

    settings = get_settings()
    app = create_app(settings, background=True)
    server = make_server(app, settings, host=host, port=port)
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise typer.Exit(_port_error(host, port))
        time.sleep(0.05)
    return server, thread, app.state.engine


# The server's shutdown lets a running background job finish (api/main.py); the embedded database
# must outlive it. A rollup over a large demo took over 10 s on a loaded 2-core VM, and a database
# stopped under it logged "rollup failed: AdminShutdown".
SHUTDOWN_NOTICE_S, SHUTDOWN_MAX_S = 10.0, 300.0


def _wait_for_server(thread: threading.Thread) -> None:
    thread.join(SHUTDOWN_NOTICE_S)
    if thread.is_alive():
        typer.echo("waiting for a background job to finish before the database stops", err=True)
        thread.join(SHUTDOWN_MAX_S - SHUTDOWN_NOTICE_S)


def _port_error(host: str, port: int) -> int:
    typer.secho(f"error: the API could not listen on {host}:{port} (in use?); try --port", fg="red", err=True)
    return 2


def _table(rows: Sequence[Mapping[str, Any]], truth: dict[int, Any]) -> str:
    head = (f"{'step':>6} {'time s':>7} {'base s':>7} {'lost s':>7}  {'layer':<8} {'component':<26} "
            f"{'conf':>5}  injected")
    lines = [head, "-" * len(head)]
    for r in rows:
        t = truth.get(r["step"])
        injected = f"{t.layer} {t.component or ''}".strip() if t is not None and t.causes else "-"
        ok = ""
        if t is not None and t.causes:
            ok = "  ✓" if (t.layer, t.component) == (r["layer"], r["component"]) else "  ✗"
        lines.append(f"{r['step']:>6} {r['duration_s']:>7.3f} {r['baseline_s'] or 0:>7.3f} {r['lost_s']:>7.3f}  "
                     f"{r['layer']:<8} {(r['component'] or '-'):<26} {r['confidence']:>5.2f}  {injected}{ok}")
    return "\n".join(lines)


def demo_command(
    host: Annotated[str, typer.Option(help="API listen address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port")] = 8000,
    hosts: Annotated[int, typer.Option(help="simulated hosts")] = 8,
    gpus_per_host: Annotated[int, typer.Option(help="GPUs (ranks) per host")] = 8,
    steps: Annotated[int, typer.Option(help="training steps to simulate")] = 150,
    faults: Annotated[int, typer.Option(help="faults to inject")] = 6,
    seed: Annotated[int, typer.Option(help="random seed of the scenario")] = 7,
    exit_after: Annotated[bool, typer.Option("--exit", help="exit after printing (do not keep serving)")] = False,
) -> None:
    """Start the API, feed it a simulated cluster with injected faults, print the slow steps and why."""
    from fabricscope.service.db.lifecycle import database, sigterm_unwinds

    stop = threading.Event()  # SIGTERM: the serving loop ends even if its exception was lost
    try:
        with sigterm_unwinds(stop), database() as dsn:
            server, thread, engine = _serve_in_thread(host, port)
            try:
                base = f"http://{host}:{port}"
                typer.echo(f"API: {base}  (docs: {base}/docs)", err=True)
                _feed_and_report(dsn, base, engine, hosts=hosts, gpus_per_host=gpus_per_host, steps=steps,
                                 faults=faults, seed=seed)
                if not exit_after and not stop.is_set():
                    typer.echo("serving; Ctrl-C to stop", err=True)
                    while thread.is_alive() and not stop.wait(0.5):
                        pass
                if stop.is_set():
                    typer.echo("stopping", err=True)
            finally:
                server.should_exit = True
                _wait_for_server(thread)
    except KeyboardInterrupt:
        typer.echo("stopped", err=True)


def _fleet_block(dsn: str, client: Any) -> str:
    """#48: the fleet ledger's top three components by GPU-hours lost (this and earlier demo runs of the
    last 7 days), rolled now rather than at the background job's next run."""
    import psycopg

    from fabricscope.service.fleet.rollup import refresh

    with psycopg.connect(dsn, autocommit=True) as conn:
        mark = conn.execute("SELECT now()").fetchone()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the background job may hold the roll: then it rolls these too
            refresh(conn)
            done = conn.execute("SELECT through >= %s FROM fleet_watermark", (mark[0] if mark else None,)).fetchone()
            if done and done[0]:
                break
            time.sleep(0.2)
    top = client.get("/v1/fleet/components", params={"limit": 3}).json().get("components", [])
    lines = ["fleet: top components by GPU-hours lost (last 7 days: GET /v1/fleet/components)"]
    for i, c in enumerate(top, 1):
        ev = (c.get("top_evidence") or {}).get("evidence") or "no evidence recorded"
        lines.append(f"  {i}. {c['component']} ({c['layer']}): {c['gpu_hours']:.3f} GPU-hours over {c['jobs']} "
                     f"job(s), {c['slow_steps']} slow steps; evidence: {ev}")
    if not top:
        lines.append("  none: no slow step was blamed on a component")
    return "\n".join(lines)


def _feed_and_report(dsn: str, base: str, engine: AttributionEngine, *, hosts: int, gpus_per_host: int,
                     steps: int, faults: int, seed: int) -> None:
    import httpx
    import psycopg

    from fabricscope.service.simulate import baseline
    from fabricscope.service.simulate.generator import generate
    from fabricscope.service.simulate.send import HttpSink, send_scenario
    from fabricscope.service.simulate.topology import ClusterSpec

    job = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"  # a new job each run: the data directory is reused
    spec = ClusterSpec(hosts=hosts, gpus_per_host=gpus_per_host, nics_per_host=min(8, gpus_per_host),
                       leaves=max(1, min(hosts // 4, 4)), spines=2)
    typer.echo(f"simulating job {job}: {hosts} hosts x {gpus_per_host} GPUs, {steps} steps, "
               f"{faults} injected faults ...", err=True)
    # the simulated fabric is the one a recorded nccl-tests run accepted: its baseline, its ring speed
    run = baseline.load_run()
    sc = generate(spec, job=job, steps=steps, faults=faults, seed=seed, t0=time.time() - steps * 1.2 - 60,
                  job_spec=baseline.job_spec_for(run))
    client = httpx.Client(base_url=base, timeout=120)
    baseline.post_run(client, run)
    sink = HttpSink(base)
    started = time.monotonic()
    counts = send_scenario(sink, sc, progress=lambda m: typer.echo(m, err=True))
    sink.put_job(job, {"labels": {"fabric": baseline.FABRIC}})
    sink.close()
    typer.echo(f"ingested {sum(counts.values()):,} records in {time.monotonic() - started:.1f}s; attributing ...",
               err=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = [a for s in engine.list_steps(conn, job=job, slow_only=True)
                if (a := engine.attribute_step(conn, job=job, step=s["step"], store=True)) is not None]
    typer.echo("")
    typer.echo(f"slow steps of {job} ({len(rows)} of {steps}):")
    typer.echo(_table(rows, sc.truth))
    typer.echo("")
    typer.echo(baseline.efficiency_block(client, sc, run))
    typer.echo("")
    typer.echo(_fleet_block(dsn, client))
    client.close()
    typer.echo("")
    typer.echo(f"query them: {base}/v1/jobs/{job}/steps?slow=true")
    if rows:
        typer.echo(f"            {base}/v1/jobs/{job}/steps/{rows[0]['step']}/attribution")
    typer.echo(f"            {base}/v1/jobs/{job}/report        (API docs: {base}/docs)")
    typer.echo(f"            {base}/v1/jobs/{job}/efficiency")
    typer.echo(f"            {base}/v1/fleet/components      {base}/v1/jobs/{{a}}/compare/{{b}}")
