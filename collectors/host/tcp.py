"""Host TCP and softirq evidence: ``/proc/net/snmp``, ``/proc/net/netstat`` and ``/proc/net/softnet_stat``.

Retransmits and RTO timeouts say a host's TCP traffic (the bootstrap, the data loader, checkpoint
uploads, NCCL's socket transport) is losing packets; softnet drops say the kernel itself dropped
packets before the stack because the per-CPU backlog was full. All are per host (source ``host``).

Which counter becomes which metric is data (:data:`TCP_COUNTERS`). The ``snmp``/``netstat`` format
is pairs of lines, ``Section: key key ...`` then ``Section: value value ...``; the key line of a
kernel never changes, so the columns wanted are resolved once per distinct key line and each poll
only splits the value lines (see :class:`ColumnPicker`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.common import read_text
from fabricscope.core.errors import ParseError
from fabricscope.core.model import Sample, now

log = logging.getLogger(__name__)

# (file under /proc/net, section, key) -> canonical metric.
TCP_COUNTERS: dict[tuple[str, str, str], str] = {
    ("snmp", "Tcp", "OutSegs"): "tcp_out_segments_total",
    ("snmp", "Tcp", "RetransSegs"): "tcp_retransmitted_segments_total",
    ("netstat", "TcpExt", "TCPTimeouts"): "tcp_timeouts_total",
    ("netstat", "TcpExt", "TCPLostRetransmit"): "tcp_lost_retransmits_total",
    ("netstat", "TcpExt", "ListenDrops"): "tcp_listen_drops_total",
}
# /proc/net/softnet_stat column (0-based, hex, one row per CPU) -> metric, summed over CPUs.
# Column 0 is packets processed; 1 dropped (backlog full); 2 time_squeeze (budget ran out).
SOFTNET_COLUMNS: dict[int, str] = {1: "softnet_dropped_total", 2: "softnet_time_squeeze_total"}


def parse_proc_net_pairs(text: str) -> dict[tuple[str, str], int]:
    """``/proc/net/snmp`` or ``/proc/net/netstat`` -> {(section, key): value}, every counter."""
    out: dict[tuple[str, str], int] = {}
    lines = [line for line in text.splitlines() if line.strip()]  # a paste's blank lines pair nothing
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        section, _, keys = head.partition(":")
        vsection, _, vals = values.partition(":")
        if not keys or section != vsection:
            raise ParseError(f"expected a key line and a value line of one section, got {head[:40]!r}")
        for key, value in zip(keys.split(), vals.split(), strict=False):
            try:
                out[(section, key)] = int(value)
            except ValueError:
                continue
    if not out:
        raise ParseError("no 'Section: keys' / 'Section: values' line pairs")
    return out


class ColumnPicker:
    """The wanted counters of one ``/proc/net`` pairs file, with the column positions cached per key line."""

    def __init__(self, file: str, table: Mapping[tuple[str, str, str], str] = TCP_COUNTERS) -> None:
        self.wanted = {(sec, key): metric for (f, sec, key), metric in table.items() if f == file}
        self._columns: dict[str, tuple[tuple[int, str], ...]] = {}  # key line -> ((index, metric), ...)

    def _resolve(self, head: str) -> tuple[tuple[int, str], ...]:
        cols = self._columns.get(head)
        if cols is None:
            section, _, keys = head.partition(":")
            cols = tuple((i, self.wanted[(section, k)]) for i, k in enumerate(keys.split())
                         if (section, k) in self.wanted)
            if len(self._columns) > 64:  # a kernel has a handful of key lines; bound it anyway
                self._columns.clear()
            self._columns[head] = cols
        return cols

    def pick(self, text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        lines = text.splitlines()
        for head, values in zip(lines[::2], lines[1::2], strict=False):
            cols = self._resolve(head)
            if not cols:
                continue
            parts = values.split()  # parts[0] is "Section:"
            for i, metric in cols:
                if i + 1 < len(parts):
                    try:
                        out[metric] = float(int(parts[i + 1]))
                    except ValueError:
                        continue
        return out


def tcp_samples(counters: Mapping[tuple[str, str], int], file: str, ts: float, source: str) -> list[Sample]:
    return [Sample(ts, source, metric, float(counters[(sec, key)]))
            for (f, sec, key), metric in TCP_COUNTERS.items() if f == file and (sec, key) in counters]


def parse_softnet_stat(text: str) -> dict[str, float]:
    """``/proc/net/softnet_stat`` -> {metric: value summed over CPUs}."""
    sums = dict.fromkeys(SOFTNET_COLUMNS.values(), 0.0)
    rows = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            for col, metric in SOFTNET_COLUMNS.items():
                sums[metric] += int(parts[col], 16)
        except (IndexError, ValueError) as exc:
            raise ParseError(f"softnet_stat row {rows}: not hex columns: {line[:60]!r}") from exc
        rows += 1
    if not rows:
        raise ParseError("no softnet_stat rows")
    return sums


class TcpCollector:
    """TCP counters and softnet drops of one host (or of the network namespace ``proc_root`` shows:
    ``/proc/<pid>`` reads the namespace of process ``pid``)."""

    name = "tcp"

    def __init__(self, host: str, *, proc_root: Path = Path("/proc"), softnet: bool = True) -> None:
        self.host, self.proc_root, self.softnet = host, proc_root, softnet
        self.pickers = {f: ColumnPicker(f) for f in ("snmp", "netstat")}

    def poll(self) -> list[Sample]:
        ts, out = now(), []
        for file, picker in self.pickers.items():
            text = read_text(self.proc_root / "net" / file)
            if text is None:
                continue  # no TCP in this namespace/kernel view: absent, not an error
            out += [Sample(ts, self.host, metric, value) for metric, value in picker.pick(text).items()]
        if self.softnet:
            text = read_text(self.proc_root / "net/softnet_stat")
            if text:
                try:
                    out += [Sample(ts, self.host, m, v) for m, v in parse_softnet_stat(text).items()]
                except ParseError as exc:
                    log.warning("tcp %s: softnet_stat: %s; skipped", self.host, exc)
        return out


# -- `fabricscope parse` formats ------------------------------------------------------------------
def _reader(file: str) -> Format:
    section = "Tcp" if file == "snmp" else "TcpExt"

    def read(path: Path, device: str, ts: float) -> Reading:
        counters = parse_proc_net_pairs(path.read_text())
        return Reading(samples=tcp_samples(counters, file, ts, device))

    def sniff(_path: Path, head: str) -> bool:
        lines = head.splitlines()
        return len(lines) >= 2 and any(line.startswith(section + ": ") for line in lines) and \
            lines[0].startswith("Ip: " if file == "snmp" else "TcpExt: ")

    return Format(f"proc-net-{file}", f"/proc/net/{file} (TCP counters: {section} section; counters)",
                  sniff=sniff, read=read)


def _read_softnet(path: Path, device: str, ts: float) -> Reading:
    return Reading(samples=[Sample(ts, device, m, v) for m, v in parse_softnet_stat(path.read_text()).items()])


def _looks_like_softnet(_path: Path, head: str) -> bool:
    rows = [line.split() for line in head.splitlines()[:4] if line.strip()]
    return bool(rows) and all(len(r) >= 9 and all(len(c) == 8 for c in r) for r in rows) and \
        all(int(c, 16) >= 0 for r in rows for c in r)


FORMATS = (
    _reader("snmp"),
    _reader("netstat"),
    Format("softnet-stat", "/proc/net/softnet_stat (per-CPU backlog drops and time squeezes, hex; summed)",
           sniff=_looks_like_softnet, read=_read_softnet,
           priority=50),  # before diskstats' sniffer: rows of 8-digit hex are more specific
)
