"""``fabricscope import ...``: post NCCL Inspector logs, Kineto traces, nccl-tests acceptance runs
or a leftover spool.

The lead mounts ``import_app`` as the ``import`` sub-command. Each command parses every file first
(a file that cannot be parsed is reported and skipped; the others still go), then posts through
the same :class:`HttpSender` as the hook, and exits non-zero if anything was skipped or not
delivered.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.training.importers import kineto, nccl_inspector
from fabricscope.collectors.training.importers.nccl_tests_cli import nccl_tests_cmd
from fabricscope.core.errors import ParseError

import_app = typer.Typer(help="Import training timings recorded by other tools.", no_args_is_help=True)
log = logging.getLogger("fabricscope.import")

UrlOpt = Annotated[str, typer.Option("--url", envvar="FABRICSCOPE_URL", help="fabricscope API base URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="FABRICSCOPE_TOKEN", help="bearer token")]
JobOpt = Annotated[str, typer.Option("--job", help="job name the timings belong to")]


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p])
    return out


def _post(url: str, token: str | None, job: str | None, kinds: dict[str, list[dict[str, Any]]],
          placement: dict[str, Any] | None = None) -> bool:
    sender = HttpSender(url, token=token, max_retries=5)
    try:
        if placement and job:
            sender.put_job(job, placement)
        for kind, items in kinds.items():
            for item in items:
                if not sender.submit(kind, item, job=job):
                    break
        ok = sender.flush(120)
    finally:
        sender.close()
    st = sender.stats
    typer.echo(f"sent {st['sent']} records, dropped {st['dropped']}")
    return ok and st["dropped"] == 0


@import_app.command("nccl-inspector")
def nccl_inspector_cmd(
    files: Annotated[list[Path], typer.Argument(help="Inspector log files or directories of them")],
    job: JobOpt,
    url: UrlOpt,
    token: TokenOpt = None,
) -> None:
    """Post NCCL Inspector per-collective records (and each rank's host) for JOB."""
    colls: list[dict[str, Any]] = []
    hosts: dict[int, str] = {}
    bad = 0
    for f in _files(files):
        try:
            c, h = nccl_inspector.parse(f.read_text(errors="replace"), str(f))
        except (OSError, ParseError) as e:
            typer.echo(f"skipped {f}: {e}", err=True)
            bad += 1
            continue
        colls.extend(c)
        hosts.update(h)
    typer.echo(f"parsed {len(colls)} collectives from {len(hosts)} ranks")
    placement = {"ranks": [{"rank": r, "host": h} for r, h in sorted(hosts.items())]} if hosts else None
    ok = _post(url, token, job, {"collectives": colls}, placement)
    if bad or not ok:
        raise typer.Exit(1)


@import_app.command("kineto")
def kineto_cmd(
    files: Annotated[list[Path], typer.Argument(help="Kineto trace files (.json or .json.gz)")],
    job: JobOpt,
    url: UrlOpt,
    rank: Annotated[int | None, typer.Option("--rank", help="rank if the trace names none")] = None,
    token: TokenOpt = None,
) -> None:
    """Post ProfilerStep steps and NCCL kernel collectives of PyTorch profiler traces for JOB."""
    steps: list[dict[str, Any]] = []
    colls: list[dict[str, Any]] = []
    bad = 0
    for f in _files(files):
        try:
            s, c = kineto.parse(kineto.load(f), rank=rank, name=str(f))
        except ParseError as e:
            typer.echo(f"skipped {f}: {e}", err=True)
            bad += 1
            continue
        steps.extend(s)
        colls.extend(c)
    typer.echo(f"parsed {len(steps)} steps and {len(colls)} collectives")
    ok = _post(url, token, job, {"steps": steps, "collectives": colls})
    if bad or not ok:
        raise typer.Exit(1)


import_app.command("nccl-tests")(nccl_tests_cmd)


@import_app.command("spool")
def spool_cmd(
    files: Annotated[list[Path], typer.Argument(help="spool files left by the hook or an agent")],
    url: UrlOpt,
    token: TokenOpt = None,
) -> None:
    """Replay spool files (batches kept while the service was away), in order, idempotently."""
    ok = True
    for f in files:
        sender = HttpSender(url, token=token, spool_path=f, max_retries=5)
        try:
            done = sender.flush(300)
        finally:
            sender.close()
        st = sender.stats
        typer.echo(f"{f}: replayed {st['replayed']} records, {st['spool_bytes']} bytes left")
        ok = ok and done
    if not ok:
        raise typer.Exit(1)
