"""``ibnetdiscover`` output → fabric nodes and cables → :class:`Link` (pure parse, recorded output in tests).

Two layouts are read: the default topology file (``Switch 24 "S-<guid>" # "desc" ... lid 6`` node
headers followed by ``[port] "S-<peer guid>"[peer port]`` lines) and the ports report of
``ibnetdiscover -p`` (``SW 1719 10 0x<guid> 4x EDR - CA 134 1 0x<guid> ( 'desc' - 'desc' )``).

Names: a switch is named from its NodeDescription (``MF0;leaf1:MQM8790/U1`` → ``leaf1``, a one-word
description as is); a description with spaces is a vendor default (``Infiniscale-IV Mellanox
Technologies``), so that switch is named ``sw-<guid>``. A CA ``node07 mlx5_0`` becomes the host
agent's source ``node07:mlx5_0`` (``/N`` for port N > 1), so fabric links meet the host's counters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricscope.collectors.host.rdma import ib_source
from fabricscope.core.errors import ParseError
from fabricscope.core.model import Link

# Per-lane data rate by IB speed name, bit/s (nominal, as the speed is marketed: 4x EDR = 100 Gb/s).
LANE_RATE: dict[str, float] = {
    "SDR": 2.5e9, "DDR": 5e9, "QDR": 10e9, "FDR10": 10e9, "FDR": 14e9, "EDR": 25e9,
    "HDR": 50e9, "NDR": 100e9, "XDR": 200e9,
}  # fmt: skip
_KIND = {"Switch": "SW", "Ca": "CA", "Rt": "RT", "S": "SW", "H": "CA", "R": "RT"}

# GUIDs are matched loosely (anything up to the quote or space) and checked after: a redacted or
# mangled GUID ("S-xxxxxxxxxxxxxxxx") then costs its own node and cables, named in one problem line,
# and never lets its port lines fall to the node above it.
_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([^"]*)"\s*#\s*"(.*?)"(.*)$')
_PORT = re.compile(
    r'^\[(\d+)\](?:\([^)]*\))?\s+"([SHR])-([^"]*)"\[(\d+)\](?:\([^)]*\))?\s*#\s*(.*)$'
)
_HEX_GUID = re.compile(r"^(?:0x)?[0-9a-fA-F]{1,16}$")
_LID = re.compile(r"\blid (\d+)")
_RATE = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\s*$")
_PLINK = re.compile(
    r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)x\s+(\S+)\s+-\s+(CA|SW|RT)\s+(\d+)\s+(\d+)\s+"
    r"(\S+)\s+\(\s*'(.*)'\s+-\s+'(.*)'\s*\)\s*$"
)
_PDOWN = re.compile(r"^(CA|SW|RT)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)x\s+(\S+)\s+(.*)$")
_MELLANOX_DESC = re.compile(r"^MF0;([^:]+):")  # NVIDIA/Mellanox switch NodeDescription


@dataclass
class Node:
    kind: str  # SW, CA, RT
    guid: str  # 16 hex digits, lower case
    desc: str
    lid: int | None = None


@dataclass(frozen=True)
class Cable:
    a_guid: str
    a_port: int
    b_guid: str
    b_port: int
    speed_bps: float | None


@dataclass
class Fabric:
    nodes: dict[str, Node] = field(default_factory=dict)
    cables: set[Cable] = field(default_factory=set)
    _ends: dict[tuple[str, int, str, int], Cable] = field(default_factory=dict, repr=False)
    problems: list[str] = field(default_factory=list)

    def add_cable(self, cable: Cable) -> None:
        """One cable is listed from both ends, possibly with different rates (the man page's own
        example does): keep one, at the lower known rate."""
        ends = (cable.a_guid, cable.a_port, cable.b_guid, cable.b_port)
        old = self._ends.get(ends)
        if old is not None:
            if old.speed_bps is not None and (cable.speed_bps is None or old.speed_bps <= cable.speed_bps):
                return
            self.cables.discard(old)
        self._ends[ends] = cable
        self.cables.add(cable)

    def switch_ports(self) -> list[tuple[Node, int]]:
        """Connected (cabled) switch ports: the ports a counter sweep reads."""
        out = {(c.a_guid, c.a_port) for c in self.cables} | {(c.b_guid, c.b_port) for c in self.cables}
        return sorted(((self.nodes[g], p) for g, p in out if g in self.nodes and self.nodes[g].kind == "SW"
                       and self.nodes[g].lid), key=lambda np: (np[0].guid, np[1]))  # fmt: skip

    def port_name(self, guid: str, port: int) -> str:
        node = self.nodes.get(guid) or Node("SW", guid, "")
        if node.kind == "SW":
            return f"{switch_name(node)}:{port}"
        words = node.desc.split()
        if len(words) == 2:  # "node07 mlx5_0", "o0001 HCA-1": host and device, as the host agent names them
            return ib_source(words[0], words[1], port)
        return ib_source(f"ca-{guid}", "hca", port)

    def links(self) -> list[Link]:
        links = set()
        for c in self.cables:
            a, b = sorted((self.port_name(c.a_guid, c.a_port), self.port_name(c.b_guid, c.b_port)))
            links.add(Link(a, b, c.speed_bps))
        return sorted(links, key=lambda link: (link.a, link.b))


def switch_name(node: Node) -> str:
    desc = node.desc.strip()
    m = _MELLANOX_DESC.match(desc)
    if m:
        return m.group(1)
    if desc and not any(ch.isspace() for ch in desc):
        return desc
    return f"sw-{node.guid}"


def _rate(width: str, speed: str) -> float | None:
    lane = LANE_RATE.get(speed)
    return int(width) * lane if lane and width.isdigit() else None


def _guid(text: str) -> str:
    return text.lower().removeprefix("0x").rjust(16, "0")


class _BadGuids:
    """GUIDs that are not 16 hex digits, with what was skipped for each: one problem line apiece."""

    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {}  # guid text -> [nodes, cables] skipped

    def ok(self, text: str, what: int) -> bool:
        if _HEX_GUID.match(text):
            return True
        self.seen.setdefault(text, [0, 0])[what] += 1
        return False

    def problems(self) -> list[str]:
        return [f"GUID {text!r} is not hexadecimal (redacted?): {n} node and {c} cable lines naming it skipped"
                for text, (n, c) in self.seen.items()]


def _cable(a: str, ap: int, b: str, bp: int, speed: float | None) -> Cable:
    # one cable is listed from both ends: order the ends so both listings give one Cable
    (a, ap), (b, bp) = sorted(((a, ap), (b, bp)))
    return Cable(a, ap, b, bp, speed)


def _note(fabric: Fabric, guid: str, kind: str, desc: str, lid: int | None) -> None:
    node = fabric.nodes.setdefault(guid, Node(kind, guid, desc.strip(), lid))
    if lid and not node.lid:
        node.lid = lid
    if desc.strip() and not node.desc:
        node.desc = desc.strip()


def parse_ibnetdiscover(text: str) -> Fabric:
    """Either ibnetdiscover layout → :class:`Fabric`. Lines that fit neither are reported, not fatal;
    a node or cable whose GUID is not hexadecimal is skipped, one problem line per such GUID."""
    fabric = Fabric()
    bad = _BadGuids()
    current: Node | None = None
    skipping: str | None = None  # the bad GUID of the node whose port lines are being skipped
    seen = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := _PLINK.match(line):
            seen = True
            a_ok, b_ok = bad.ok(m[4], 1), bad.ok(m[10], 1)
            if a_ok:
                _note(fabric, _guid(m[4]), m[1], m[11], int(m[2]))
            if b_ok:
                _note(fabric, _guid(m[10]), m[7], m[12], int(m[8]))
            if a_ok and b_ok:
                fabric.add_cable(_cable(_guid(m[4]), int(m[3]), _guid(m[10]), int(m[9]), _rate(m[5], m[6])))
        elif m := _PDOWN.match(line):
            seen = True  # a port with nothing behind it: the node is known, no cable
            if bad.ok(m[4], 0):
                _note(fabric, _guid(m[4]), m[1], m[7].strip().strip("'"), int(m[2]))
        elif m := _NODE.match(line):
            seen = True
            current, skipping = None, m[4]  # a node whose GUID is bad owns the port lines below it: they go too
            if bad.ok(m[4], 0):
                skipping = None
                lid = _LID.search(m[6]) if m[1] == "Switch" else None
                _note(fabric, _guid(m[4]), _KIND[m[1]], m[5], int(lid[1]) if lid else None)
                current = fabric.nodes[_guid(m[4])]
        elif m := _PORT.match(line):
            if current is None:
                if skipping is not None:
                    bad.seen[skipping][1] += 1
                    bad.ok(m[3], 1)  # a bad peer is named too, though the line is already lost
                else:
                    fabric.problems.append(f"port line before any node line: {line[:120]}")
                continue
            if not bad.ok(m[3], 1):
                continue
            comment = m[5]
            peer_desc = re.findall(r'"(.*?)"', comment)
            peer_lid = _LID.findall(comment)
            if current.kind != "SW" and peer_lid and not current.lid:
                current.lid = int(peer_lid[0])  # a CA's line starts with its own lid
            rate = _RATE.search(comment)
            _note(fabric, _guid(m[3]), _KIND[m[2]], peer_desc[-1] if peer_desc else "",
                  int(peer_lid[-1]) if peer_lid else None)  # fmt: skip
            speed = _rate(rate[1], rate[2]) if rate else None
            fabric.add_cable(_cable(current.guid, int(m[1]), _guid(m[3]), int(m[4]), speed))
        elif not re.match(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid|Non-Chassis|Chassis)\b", line):
            fabric.problems.append(f"unrecognised line: {line[:120]}")
    fabric.problems.extend(bad.problems())
    if not seen:
        raise ParseError("no node or port line: not ibnetdiscover output")
    return fabric
