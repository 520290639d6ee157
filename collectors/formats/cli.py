"""``fabricscope parse FILE``: what fabricscope would read from a recorded output, without a device
or a database (like Telegraf's ``--test``). One JSON object per line on stdout, a summary on stderr.

Exit 0 when something canonical was read; 2 for an unknown or unreadable input, or one where nothing
canonical came out (only vendor extras, or nothing), with the reason; 3 when something was read but a
guess was made (a driver sniffed, a resource or column layout inferred) that no option confirmed. The
summary lists the problems (what was skipped or could not be placed) and the guesses.
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

EXIT_UNCONFIRMED_GUESS = 3


def _line(kind: str, body: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **body}, sort_keys=False, separators=(",", ":"))


def _fail(message: str) -> None:
    typer.secho(f"fabricscope parse: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _list(reg: formats.Registry) -> None:
    for fmt in sorted(reg.formats.values(), key=lambda f: f.name):
        kind = "directory" if fmt.directory else "file"
        opts = f" [options: {', '.join('--' + o for o in fmt.options)}]" if fmt.options else ""
        typer.echo(f"{fmt.name:<24} {kind:<9} {fmt.description}{opts}")
    for module, missing in sorted(reg.unavailable.items()):
        typer.echo(f"# not loaded: {module} (needs {missing})", err=True)


_PATH_HELP = "A recorded output (a file, or a directory for sysfs trees)."
_FORMAT_HELP = "Format name (see --list); sniffed when omitted."
_DEVICE_HELP = "Device (or device:interface) the samples' sources are named after."
_TS_HELP = "Timestamp for samples whose input carries none (default: the file's mtime)."


def _options(fmt: formats.Format, given: dict[str, str | None]) -> dict[str, str]:
    """The options ``fmt`` takes that were given; an option it does not take is an error, not ignored."""
    unused = [k for k, v in given.items() if v is not None and k not in fmt.options]
    if unused:
        _fail(f"format {fmt.name} takes no {', '.join('--' + k for k in unused)}"
              + (f" (it takes {', '.join('--' + o for o in fmt.options)})" if fmt.options else ""))
    return {k: v for k, v in given.items() if v is not None}


def _canonical(reading: formats.Reading) -> int:
    """Items that are not a vendor key kept verbatim as an extra (``ethtool_<key>_total`` ...)."""
    return (sum(1 for s in reading.samples if not s.metric.startswith(formats.EXTRA_PREFIXES))
            + len(reading.events) + len(reading.links))


def _ambiguity(reg: formats.Registry, chosen: formats.Format, path: Path, device: str, when: float) -> list[str]:
    """A sniffed input another format also reads something canonical from (a whole /sys tree holds interface,
    RDMA and PCIe files): which one was meant is a guess, said, never a silent pick by sniff order."""
    others = []
    for other in reg.also(path, chosen):
        try:
            if _canonical(other.read(path, device, when)):
                others.append(other.name)
        except (ParseError, OSError, UnicodeDecodeError, ValueError):
            continue
    if not others:
        return []
    return [f"sniffed as {chosen.name}, but this input also reads as {', '.join(others)}: "
            f"name the one meant with --format"]


def parse_command(
    path: Annotated[Path | None, typer.Argument(help=_PATH_HELP)] = None,
    fmt: Annotated[str | None, typer.Option("--format", "-f", help=_FORMAT_HELP)] = None,
    device: Annotated[str, typer.Option("--device", "-d", help=_DEVICE_HELP)] = "device",
    ts: Annotated[float | None, typer.Option(help=_TS_HELP)] = None,
    list_formats: Annotated[bool, typer.Option("--list", help="List the known formats and exit.")] = False,
    driver: Annotated[str | None, typer.Option(help=formats.OPTIONS["driver"])] = None,
    resource: Annotated[str | None, typer.Option(help=formats.OPTIONS["resource"])] = None,
    cgroup: Annotated[str | None, typer.Option(help=formats.OPTIONS["cgroup"])] = None,
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
    opts = _options(chosen, {"driver": driver, "resource": resource, "cgroup": cgroup})
    try:
        reading = chosen.read(path, device, when, **opts)
    except ParseError as exc:
        _fail(f"{path}: not readable as {chosen.name}: {exc}")
        return
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{path}: cannot read: {exc}")
        return
    if fmt is None:
        reading.guesses.extend(_ambiguity(reg, chosen, path, device, when))
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
               "canonical": _canonical(reading), "problems": reading.problems, "guesses": reading.guesses}
    typer.echo("summary " + json.dumps(summary), err=True)
    for problem in reading.problems:
        typer.echo(f"problem: {problem}", err=True)
    for guess in reading.guesses:
        typer.echo(f"guess: {guess}", err=True)
    if _canonical(reading) == 0:
        _fail(f"{path}: read as {chosen.name} but nothing canonical came out"
              + (f" ({len(set(reading.unmapped))} unmapped keys)" if reading.unmapped else ""))
    if reading.guesses:
        typer.secho(f"fabricscope parse: {len(reading.guesses)} unconfirmed guess(es); confirm with the options "
                    "named above", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(EXIT_UNCONFIRMED_GUESS)
