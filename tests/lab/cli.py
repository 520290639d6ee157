"""``python -m tests.lab up|run|down`` (root): the fault-injection lab (see docs/lab.md)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from tests.lab import faults as F
from tests.lab import kernel
from tests.lab.spec import DEFAULT_PREFIX, LabSpec

lab_app = typer.Typer(help="A leaf-spine fabric in network namespaces, a real training job, injected faults.",
                      no_args_is_help=True)
PREFIX = typer.Option(DEFAULT_PREFIX, "--prefix", help="Name prefix of every lab namespace, cgroup and file.")


def _spec(prefix: str) -> LabSpec:
    try:
        return LabSpec.default(prefix)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@lab_app.command("up")
def up(prefix: str = PREFIX) -> None:
    """Build the fabric only (namespaces, veths, bridges, nftables, cgroups, checkpoint volumes)."""
    spec = _spec(prefix)
    try:
        kernel.up(spec)
    except kernel.LabError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"lab {prefix} up: {', '.join(spec.namespaces)}")


@lab_app.command("down")
def down(prefix: str = PREFIX) -> None:
    """Remove everything of the lab (idempotent; also after a crash)."""
    left = kernel.down(_spec(prefix))
    if left:
        typer.echo(f"could not remove: {left}", err=True)
        raise typer.Exit(1)
    typer.echo(f"lab {prefix} down, nothing left")


@lab_app.command("run")
def run(
    prefix: str = PREFIX,
    fault: list[str] = typer.Option(list(F.FAULTS), "--fault", help=f"Faults in order: {', '.join(F.FAULTS)}."),
    url: str | None = typer.Option(None, help="A running fabricscope API (default: start one here)."),
    database_url: str | None = typer.Option(None, envvar="DATABASE_URL",
                                            help="Database for the API started here (default: embedded)."),
    warmup: float = typer.Option(25.0, help="Seconds of healthy steps before the first fault."),
    gap: float = typer.Option(12.0, help="Seconds of recovery after each fault."),
    log_dir: Path | None = typer.Option(None, help="Keep process logs here."),
    job: str = typer.Option("lab-train", help="Job name."),
    keep: bool = typer.Option(False, help="Leave the lab up afterwards (then: python -m tests.lab down)."),
    answers: str = typer.Option("ask", help="ask: the lab asks for each slow step's answer 3 s after its end; "
                                "stored: the service's attribution worker runs and the lab times what it stores."),
    on_arrival: bool = typer.Option(True, help="With --answers stored: the service judges steps as they arrive "
                                    "(FABRICSCOPE_CORRELATE_ON_ARRIVAL); off: on its 5 s interval only."),
) -> None:
    """Run the lab end to end and print the per-fault table."""
    from tests.lab.runner import Options, run_lab

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if answers not in ("ask", "stored"):
        typer.echo("error: --answers is ask or stored", err=True)
        raise typer.Exit(2)
    unknown = [f for f in fault if f not in F.FAULTS]
    if unknown:
        typer.echo(f"error: unknown fault(s) {unknown}; known: {', '.join(F.FAULTS)}", err=True)
        raise typer.Exit(2)
    opts = Options(faults=fault, warmup_s=warmup, gap_s=gap, url=url, database_url=database_url, job=job,
                   log_dir=log_dir, keep=keep, answers=answers, on_arrival=on_arrival)
    try:
        result, left = run_lab(_spec(prefix), opts)
    except kernel.LabError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    assert result is not None
    typer.echo(result.table)
    typer.echo(f"\nsteps: {result.steps}; slow steps outside faults: {result.outside_slow or 'none'}; "
               f"LLDP links: {len(result.lldp_links)} (matches wiring: {result.lldp_matches_wiring}); "
               f"{result.wall_s:.0f} s")
    for r in result.results:
        typer.echo(f"  {r.fault}: {r.answers}")
    if left:
        typer.echo(f"teardown left: {left}", err=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    lab_app()
