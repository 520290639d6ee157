"""``fabricscope parse`` formats for recorded SNMP walks: ``snmpwalk -On`` text and snmpsim ``.snmprec``.

Both become numeric varbinds for :func:`.parse.parse` with the standard tables plus the vendor tables
of the vendor whose OIDs the walk holds (no inventory hint here), and the LLDP-MIB rows become
links, as a poll would.
"""

from __future__ import annotations

import re
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.errors import ParseError

from ..base import speeds_of
from . import oids
from .lldp import links_from_snmp
from .parse import Value, parse

_SNMPREC_INT = {"2", "65", "66", "67", "70"}  # INTEGER, Counter32, Gauge32, TimeTicks, Counter64
_SNMPREC_LINE = re.compile(r"^\.?\d+(\.\d+)+\|\w+\|")
_WALK_LINE = re.compile(r"^(\.?\d+(?:\.\d+)+) = (?:([\w-]+): ?)?(.*)$")
_WALK_INT = {"INTEGER", "Counter32", "Counter64", "Gauge32", "Unsigned32", "Timeticks", "Integer32"}
_PAREN_NUMBER = re.compile(r"\((\d+)\)")  # enum "up(1)", Timeticks "(42835038) 4 days, ..."


def read_snmprec(text: str) -> tuple[list[tuple[str, Value]], list[str]]:
    """snmpsim ``oid|type|value`` lines (``4x`` = hex OCTET STRING) → varbinds, problems."""
    out: list[tuple[str, Value]] = []
    problems: list[str] = []
    for line in text.splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3:
            continue
        oid, kind, value = parts
        try:
            if kind in _SNMPREC_INT:
                out.append((oid, int(value)))
            elif kind == "4x":
                out.append((oid, bytes.fromhex(value)))
            elif kind == "4":
                out.append((oid, value.encode("utf-8", errors="surrogateescape")))
        except ValueError:
            problems.append(f"{oid}: type {kind} value {value[:40]!r} does not fit its type")
    return out, problems


def read_snmpwalk(text: str) -> tuple[list[tuple[str, Value]], list[str]]:
    """``snmpwalk -On`` / ``snmpbulkwalk -On`` lines → varbinds, problems (continuation lines of a
    wrapped string are skipped: no counter or name we read wraps)."""
    out: list[tuple[str, Value]] = []
    problems: list[str] = []
    for line in text.splitlines():
        m = _WALK_LINE.match(line)
        if not m:
            continue
        oid, kind, value = m[1].lstrip("."), m[2] or "", m[3].strip()
        try:
            if kind in _WALK_INT:
                paren = _PAREN_NUMBER.search(value)
                out.append((oid, int(paren[1]) if paren and not value.lstrip("-").isdigit() else int(value)))
            elif kind == "Hex-STRING":
                out.append((oid, bytes.fromhex(value.replace(" ", ""))))
            elif kind == "STRING":
                out.append((oid, value.strip('"').encode()))
            elif kind == "" and value == '""':
                out.append((oid, b""))
        except ValueError:
            problems.append(f"{oid}: {kind} {value[:40]!r} is not a number")
    return out, problems


def _reading(device: str, ts: float, varbinds: list[tuple[str, Value]], problems: list[str]) -> Reading:
    if not varbinds:
        raise ParseError("no varbinds")
    polled = parse(device, varbinds, ts, oids.columns_for(oids.vendor_in(oid for oid, _ in varbinds)))
    mib = [vb for vb in varbinds if vb[0].startswith("1.0.8802.")]
    links = links_from_snmp(device, mib, speeds_of(polled.samples), polled.if_names) if mib else []
    return Reading(samples=polled.samples, links=links, problems=problems + polled.problems)


def _read_snmprec(path: Path, device: str, ts: float) -> Reading:
    return _reading(device, ts, *read_snmprec(path.read_text(errors="surrogateescape")))


def _read_snmpwalk(path: Path, device: str, ts: float) -> Reading:
    return _reading(device, ts, *read_snmpwalk(path.read_text(errors="replace")))


def _looks_like_snmprec(path: Path, head: str) -> bool:
    lines = [ln for ln in head.splitlines()[:20] if ln.strip()]
    return bool(lines) and all(_SNMPREC_LINE.match(ln) for ln in lines[:-1] or lines)


def _looks_like_snmpwalk(path: Path, head: str) -> bool:
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    return bool(_WALK_LINE.match(first))


FORMATS = (
    Format("snmprec", "snmpsim .snmprec walk (oid|type|value): IF-MIB, EtherLike, PFC, queue MIBs, LLDP",
           sniff=_looks_like_snmprec, read=_read_snmprec),
    Format("snmpwalk", "`snmpwalk -On` / `snmpbulkwalk -On` output (numeric OIDs), same tables as snmprec",
           sniff=_looks_like_snmpwalk, read=_read_snmpwalk),
)
