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
from .mibnames import numeric
from .parse import Value, parse

_SNMPREC_INT = {"2", "65", "66", "67", "70"}  # INTEGER, Counter32, Gauge32, TimeTicks, Counter64
_SNMPREC_LINE = re.compile(r"^\.?\d+(\.\d+)+\|\w+\|")
# an OID line: numeric (`-On`), or named as net-snmp prints by default (`IF-MIB::ifInOctets.1`, `iso.3.6...`),
# at the start of the line or indented (a paste in a document)
_WALK_LINE = re.compile(r"^\s*(\.?\d+(?:\.\d+)+|iso(?:\.\d+)+|[A-Za-z][\w-]*::\S+) = (?:([\w-]+): ?)?(.*)$")
_WITH_UNIT = re.compile(r"^(-?\d+)\s+[A-Za-z][A-Za-z ]*$")  # "8751 frames": a MIB's UNITS printed after it
# The type names net-snmp prints, by their lower-case spelling (some tools print them in capitals: COUNTER64):
# what each becomes. Types that carry no count are skipped; any other type is said, never dropped in silence.
_WALK_TYPES = {"integer": "int", "integer32": "int", "counter32": "int", "counter64": "int", "gauge32": "int",
               "unsigned32": "int", "timeticks": "ticks", "hex-string": "hex", "string": "str"}
_WALK_NO_COUNT = {"oid", "ipaddress", "bits", "opaque", "null", "network address", "networkaddress"}
_PAREN_NUMBER = re.compile(r"\((\d+)\)")  # enum "up(1)", Timeticks "(42835038) 4 days, ..."
# Timeticks printed without the raw count: "0:0:11:50.48" (d:h:m:s.cs) or "4 days, 21:21:18.00"
_TICKS_CLOCK = re.compile(r"^(?:(\d+)[: ](?:days?, )?)?(\d+):(\d+):(\d+)\.(\d\d)$")


def _clock_ticks(value: str) -> int | None:
    """A Timeticks value printed as a clock -> hundredths of a second; None when it is not one."""
    m = _TICKS_CLOCK.match(value)
    if not m:
        return None
    days, hours, minutes, seconds, cs = (int(g or 0) for g in m.groups())
    return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 100 + cs


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
    """``snmpwalk`` / ``snmpbulkwalk`` lines, numeric (``-On``) or named (mibnames) → varbinds, problems. A line
    that is not an OID line (a wrapped string's continuation, a tool's banner or timing line), a name with no
    numeric OID known here, a type with no rule: each kind skipped and counted in one problem line; no counter
    or name we read wraps."""
    out: list[tuple[str, Value]] = []
    problems: list[str] = []
    other: list[str] = []
    untyped: list[tuple[str, str]] = []  # (type, line)
    unnamed: list[str] = []  # MIB names with no numeric OID known here
    for line in text.splitlines():
        m = _WALK_LINE.match(line)
        if not m:
            if line.strip():
                other.append(line.strip())
            continue
        oid, kind, value = numeric(m[1]), m[2] or "", m[3].strip()
        if oid is None:
            unnamed.append(m[1])
            continue
        rule = _WALK_TYPES.get(kind.lower())
        try:
            if rule is not None:
                out.append((oid, _walk_value(rule, value)))
            elif kind == "" and value == '""':
                out.append((oid, b""))
            elif kind == "" and value.isdigit():  # `-Ot` prints Timeticks as a bare number, without its type
                out.append((oid, int(value)))
            elif kind.lower() not in _WALK_NO_COUNT:
                untyped.append((kind or "no type", line.strip()[:60]))
        except ValueError:
            problems.append(f"{oid}: {kind} {value[:40]!r} is not a number")
    if untyped:
        kinds = sorted({k for k, _ in untyped})
        problems.append(f"{len(untyped)} OID lines of a type not read ({', '.join(kinds)}), skipped, "
                        f"the first {untyped[0][1]!r}")
    if unnamed:
        objects = sorted({name.split(".", 1)[0] for name in unnamed})
        problems.append(f"{len(unnamed)} lines name an object with no numeric OID known here (not one fabricscope "
                        f"reads), skipped: {', '.join(objects[:6])}{', ...' if len(objects) > 6 else ''}")
    if other:
        problems.append(f"{len(other)} lines not an OID line, skipped (wrapped values, banners), "
                        f"the first {other[0][:60]!r}")
    return out, problems


def _walk_value(rule: str, value: str) -> Value:
    if rule == "hex":
        return bytes.fromhex(value.replace(" ", ""))
    if rule == "str":
        return value.strip('"').encode()
    ticks = _clock_ticks(value) if rule == "ticks" else None
    if ticks is not None:
        return ticks
    paren = _PAREN_NUMBER.search(value)
    unit = _WITH_UNIT.match(value)
    return int(paren[1]) if paren and not value.lstrip("-").isdigit() else int(unit[1]) if unit else int(value)


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
    # OID lines from the first line, or after at most two lines of a tool's banner or prompt
    lines = [ln for ln in head.splitlines() if ln.strip()][:8]
    hits = [i for i, ln in enumerate(lines) if _WALK_LINE.match(ln)]
    return bool(hits) and hits[0] <= 2 and len(hits) >= min(3, len(lines) - hits[0])


FORMATS = (
    Format("snmprec", "snmpsim .snmprec walk (oid|type|value): IF-MIB, EtherLike, PFC, queue MIBs, LLDP",
           sniff=_looks_like_snmprec, read=_read_snmprec),
    Format("snmpwalk", "`snmpwalk` / `snmpbulkwalk` output (numeric OIDs, or IF-MIB/EtherLike names), same tables "
           "as snmprec",
           sniff=_looks_like_snmpwalk, read=_read_snmpwalk),
)
