"""``fabricscope parse FILE``: what fabricscope would read from a recorded output, without a device
or a database (like Telegraf's ``--test``). One JSON object per line on stdout, a summary on stderr.

Exit 0 when something was read, 2 for an unknown or unreadable input (with the reason).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from fabricscope.collectors import formats
from fabricscope.core.errors import ParseError


def _line(kind: str, body: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **body}, sort_keys=False, separators=(",", ":"))


def _fail(message: str) -> None:
    typer.secho(f"fabricscope parse: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _list(reg: formats.Registry) -> None:
    for fmt in sorted(reg.formats.values(), key=lambda f: f.name):
        kind = "directory" if fmt.directory else "file"
        typer.echo(f"{fmt.name:<24} {kind:<9} {fmt.description}")
    for module, missing in sorted(reg.unavailable.items()):
        typer.echo(f"# not loaded: {module} (needs {missing})", err=True)


_PATH_HELP = "A recorded output (a file, or a directory for sysfs trees)."
_FORMAT_HELP = "Format name (see --list); sniffed when omitted."
_DEVICE_HELP = "Device (or device:interface) the samples' sources are named after."
_TS_HELP = "Timestamp for samples whose input carries none (default: the file's mtime)."


def parse_command(
    path: Annotated[Path | None, typer.Argument(help=_PATH_HELP)] = None,
    fmt: Annotated[str | None, typer.Option("--format", "-f", help=_FORMAT_HELP)] = None,
    device: Annotated[str, typer.Option("--device", "-d", help=_DEVICE_HELP)] = "device",
    ts: Annotated[float | None, typer.Option(help=_TS_HELP)] = None,
    list_formats: Annotated[bool, typer.Option("--list", help="List the known formats and exit.")] = False,
) -> None:
    """Print what fabricscope reads from FILE: samples, events and links, one JSON object per line."""
    reg = formats.load()
    if list_formats:
        _list(reg)
        return
    if path is None:
        _fail("give a FILE to parse (or --list for the known formats)")
        return
    if not path.exists():
        _fail(f"{path}: no such file or directory")
    try:
        chosen = reg.get(fmt) if fmt else reg.sniff(path)
    except ParseError as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"{path}: cannot read: {exc.strerror or exc}")
        return
    if chosen is None:
        _fail(f"{path}: format not recognised; name one with --format (known: {', '.join(sorted(reg.formats))})")
        return
    if chosen.directory != path.is_dir():
        _fail(f"{path}: format {chosen.name} reads a {'directory' if chosen.directory else 'file'}")
    when = ts if ts is not None else path.stat().st_mtime
    try:
        reading = chosen.read(path, device, when)
    except ParseError as exc:
        _fail(f"{path}: not readable as {chosen.name}: {exc}")
        return
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{path}: cannot read: {exc}")
        return
    out = sys.stdout
    for s in reading.samples:
        out.write(_line("sample", s.to_json()) + "\n")
    for e in reading.events:
        body = e.to_json()
        body["event"] = body.pop("kind")  # the line's own "kind" says what the line is
        out.write(_line("event", body) + "\n")
    for link in reading.links:
        out.write(_line("link", link.to_json()) + "\n")
    out.flush()
    sources = Counter(s.source for s in reading.samples)
    summary = {"format": chosen.name, "items": reading.items, "samples": len(reading.samples),
               "events": len(reading.events), "links": len(reading.links), "sources": len(sources),
               "metrics": len({s.metric for s in reading.samples}), "unmapped": sorted(set(reading.unmapped)),
               "problems": reading.problems}
    typer.echo("summary " + json.dumps(summary), err=True)
    if reading.items == 0:
        _fail(f"{path}: read as {chosen.name} but nothing in it was understood"
              + (f" ({len(set(reading.unmapped))} unmapped keys)" if reading.unmapped else ""))
