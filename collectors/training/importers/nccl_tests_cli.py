"""``fabricscope import nccl-tests FILE... --fabric NAME``: acceptance runs -> ``POST /v1/acceptance/runs``.

Every file is read first; a file that cannot be read or holds no nccl-tests output is reported
and the others still go. One progress line per run on stderr (stdout carries only the JSON lines
of ``--dry-run``). Exit status: 2 if a file or an option was unusable, 1 if a run was not sent
(no rows, no op, no rank count, or the service refused it; with ``--dry-run``, if it would not be
sent), else 0.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.collectors.training.importers.nccl_tests import OPS, ParsedRun, parse
from fabricscope.core.backoff import backoff_delay
from fabricscope.core.errors import ParseError

ROUTE = "/v1/acceptance/runs"
ATTEMPTS = 4
SHOWN_PROBLEMS = 20


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(2)


def _labels(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--label {pair!r}: expected key=value")
        out[key.strip()] = value
    return out


def _zone(name: str) -> tzinfo:
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise _fail(f"--tz {name!r}: not a time zone name ({e})") from e


def _token(token: str | None, token_file: Path | None) -> str | None:
    if token_file is None:
        return token
    try:
        return token_file.read_text().strip()
    except OSError as e:  # the path is named, never the contents
        raise _fail(f"--token-file {token_file}: cannot read: {e.strerror}") from e


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p])
    return out


def _summary(name: str, run: ParsedRun) -> str:
    avg = "-" if run["avg_busbw_gbps"] is None else f"{run['avg_busbw_gbps']:g} GB/s"
    wrong = "-" if run["wrong_total"] is None else run["wrong_total"]
    return (f"{name}: {run['op'] or '?'}, {run['ranks'] or '?'} ranks, {run['nodes'] or '?'} nodes, "
            f"{len(run['rows'])} rows, avg busbw {avg}, wrong {wrong}, {len(run['problems'])} problems")


def _unsendable(run: ParsedRun) -> str | None:
    missing = [what for what, absent in (("result rows", not run["rows"]), ("op", run["op"] is None),
                                         ("rank count", run["ranks"] is None)) if absent]
    return f"no {', no '.join(missing)}" if missing else None


def _post(transport: HttpTransport, body: dict[str, Any]) -> str | None:
    """None when the service took the run, else why not (after retrying what may pass later)."""
    data = json.dumps(body).encode()
    for attempt in range(1, ATTEMPTS + 1):
        outcome = transport.request("POST", ROUTE, data, gzipped=False)
        if outcome.kind == "ok":
            return None
        if outcome.kind != "retry" or attempt == ATTEMPTS:
            return outcome.reason or outcome.kind
        wait = outcome.retry_after if outcome.retry_after is not None else backoff_delay(attempt, base=1.0, cap=10.0)
        time.sleep(wait)
    return "not sent"


FilesArg = Annotated[list[Path], typer.Argument(help="nccl-tests/rccl-tests output (stdout or -J JSON), or folders")]
FabricOpt = Annotated[str, typer.Option("--fabric", help="the fabric the runs measured; baselines are per fabric")]
LabelOpt = Annotated[list[str] | None, typer.Option("--label", help="key=value, repeatable")]
UrlOpt = Annotated[str | None, typer.Option("--url", envvar="FABRICSCOPE_URL", help="fabricscope API base URL")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="FABRICSCOPE_TOKEN", help="bearer token (ingest)")]
TokenFileOpt = Annotated[Path | None, typer.Option("--token-file", help="file holding the bearer token")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="print the parsed runs as JSON lines; send nothing")]
OpOpt = Annotated[str | None, typer.Option("--op", help=f"op when the output names none: {', '.join(OPS)}")]
TzOpt = Annotated[str, typer.Option("--tz", help="time zone of the times nccl-tests prints (-S, JSON)")]


def nccl_tests_cmd(files: FilesArg, fabric: FabricOpt, label: LabelOpt = None, url: UrlOpt = None,
                   token: TokenOpt = None, token_file: TokenFileOpt = None, dry_run: DryRunOpt = False,
                   op: OpOpt = None, tz: TzOpt = "UTC") -> None:
    """Import nccl-tests / rccl-tests acceptance runs of FABRIC (POST /v1/acceptance/runs)."""
    if not fabric.strip():
        raise _fail("--fabric: must not be empty")
    if op is not None and op not in OPS:
        raise _fail(f"--op {op!r}: one of {', '.join(OPS)}")
    labels, zone, bearer = _labels(label or []), _zone(tz), _token(token, token_file)
    if not dry_run and not url:
        raise _fail("--url (or FABRICSCOPE_URL) is required unless --dry-run")
    transport = None if dry_run or not url else HttpTransport(url, token=bearer, timeout_s=30.0)
    unreadable = unsent = 0
    for f in _files(files):
        try:
            runs = parse(f.read_text(encoding="utf-8", errors="replace"), source=f.name, op=op, tz=zone)
            mtime = f.stat().st_mtime
        except OSError as e:
            typer.echo(f"{f}: cannot read: {e.strerror}", err=True)
            unreadable += 1
            continue
        except ParseError as e:
            typer.echo(f"{f}: {e}", err=True)
            unreadable += 1
            continue
        for i, run in enumerate(runs):
            name = f"{f}" if len(runs) == 1 else f"{f}#{i + 1}"
            typer.echo(_summary(name, run), err=True)
            for p in run["problems"][:SHOWN_PROBLEMS]:
                typer.echo(f"  {name}: {p}", err=True)
            if len(run["problems"]) > SHOWN_PROBLEMS:
                typer.echo(f"  {name}: ... {len(run['problems']) - SHOWN_PROBLEMS} more", err=True)
            body: dict[str, Any] = {"fabric": fabric, "labels": labels, **run}
            if body["started_at"] is None:
                body["started_at"] = mtime
            if dry_run:
                typer.echo(json.dumps(body))
                if why := _unsendable(run):  # a dry run fails where the real one would
                    typer.echo(f"{name}: would not be sent: {why}", err=True)
                    unsent += 1
                continue
            why = _unsendable(run) or (_post(transport, body) if transport else "no --url")
            if why:
                typer.echo(f"{name}: not sent: {why}", err=True)
                unsent += 1
    if unreadable or unsent:
        raise typer.Exit(2 if unreadable else 1)
