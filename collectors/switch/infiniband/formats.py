"""``fabricscope parse`` formats for recorded InfiniBand tool output: ``perfquery`` and ``ibnetdiscover``."""

from __future__ import annotations

import re
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.rdma import PERFQUERY_NAMES, PERFQUERY_SKIP, parse_perfquery
from fabricscope.core.values import counter, shown

from .counters import SWITCH_PORT_COUNTERS, port_samples
from .topology import parse_ibnetdiscover

# "#" optional: a Markdown or HTML rendering of a paste drops it (rdma.parse_perfquery reads it the same way)
_PERFQUERY_HEAD = re.compile(r"^\s*#?\s*Port (extended )?counters: Lid \d+ port \d+", re.MULTILINE)
_IBND_HEAD = re.compile(r"^(# Topology file: generated|(Switch|Ca)\s+\d+\s+\"[SH]-|(CA|SW)\s+\d+\s+\d+\s+0x)",
                        re.MULTILINE)  # fmt: skip
_FIELD = re.compile(r"^\s*(\w+):\.+(.*)$", re.MULTILINE)
_MAPPED = {k for k, v in PERFQUERY_NAMES.items() if v in SWITCH_PORT_COUNTERS}


def _read_perfquery(path: Path, device: str, ts: float) -> Reading:
    text = path.read_text()
    out = Reading()
    for port, counters in sorted(parse_perfquery(text).items()):
        out.samples += port_samples(counters, f"{device}:{port}", ts)
    seen = {m[1] for m in re.finditer(r"^(\w+):\.", text, re.MULTILINE)}
    out.unmapped = sorted(seen - _MAPPED - PERFQUERY_SKIP)
    for m in _FIELD.finditer(text):  # a value the parser could not take is named, never dropped silently
        if m[1] not in PERFQUERY_SKIP and not _is_counter(m[2]):
            out.problems.append(f"{device}: {m[1]}={shown(m[2].strip())} is not a 64-bit counter, skipped")
    for line in text.splitlines():  # neither a header nor a field (a wrapper's timestamp, an ibwarn): said
        if line.strip() and not _PERFQUERY_HEAD.match(line) and not _FIELD.match(line):
            out.problems.append(f"line not a perfquery field, skipped: {shown(line.strip())}")
    return out


def _is_counter(text: str) -> bool:
    try:
        counter(int(text.strip(), 0))
    except ValueError:
        return False
    return True


def _read_ibnetdiscover(path: Path, device: str, ts: float) -> Reading:
    fabric = parse_ibnetdiscover(path.read_text())
    return Reading(links=fabric.links(), problems=fabric.problems)


FORMATS = (
    Format("perfquery", "`perfquery -x LID PORT` PMA port counters (sources DEVICE:PORT)",
           sniff=lambda _p, head: bool(_PERFQUERY_HEAD.search(head)), read=_read_perfquery),
    Format("ibnetdiscover", "`ibnetdiscover` topology (default or -p layout) → links switch:port / host:hca",
           sniff=lambda _p, head: bool(_IBND_HEAD.search(head)), read=_read_ibnetdiscover),
)
