"""Readers for recorded raw device output and the one function per collector that turns a case
directory into samples/links (shared by the parametrised test and the fixture regenerator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict

from fabricscope.collectors.switch.gnmi.parse import parse as gnmi_parse
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.collectors.switch.netconf import models
from fabricscope.collectors.switch.netconf.parse import parse as netconf_parse
from fabricscope.collectors.switch.snmp import lldp as snmp_lldp
from fabricscope.collectors.switch.snmp import oids
from fabricscope.collectors.switch.snmp.parse import Value
from fabricscope.collectors.switch.snmp.parse import parse as snmp_parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TS = 1_700_000_000.0
_INT_TYPES = {"2", "65", "66", "67", "70"}


def read_snmprec(path: Path) -> list[tuple[str, Value]]:
    """snmpsim ``.snmprec`` (``oid|type|value``; ``4x`` = hex) → numeric varbinds."""
    out: list[tuple[str, Value]] = []
    for line in path.read_text(errors="surrogateescape").splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3:
            continue
        oid, kind, value = parts
        if kind in _INT_TYPES:
            out.append((oid, int(value)))
        elif kind == "4x":
            out.append((oid, bytes.fromhex(value)))
        elif kind == "4":
            out.append((oid, value.encode("utf-8", errors="surrogateescape")))
    return out


def read_gnmi(path: Path) -> list[gnmi_pb2.SubscribeResponse]:
    return [ParseDict(r, gnmi_pb2.SubscribeResponse()) for r in json.loads(path.read_text())]


def case_meta(case: Path) -> dict[str, Any]:
    meta = case / "case.json"
    return json.loads(meta.read_text()) if meta.exists() else {}


def run_case(kind: str, case: Path) -> dict[str, Any]:
    meta = case_meta(case)
    device = meta.get("device", "sw1")
    if kind == "snmp":
        p = snmp_parse(device, read_snmprec(case / "input.snmprec"), TS, oids.columns_for(meta.get("vendor")))
        return {"samples": [s.to_json() for s in p.samples], "problems": p.problems,
                "uptime_ticks": p.uptime_ticks}  # fmt: skip
    if kind == "lldp":
        vbs = read_snmprec(case / "input.snmprec")
        p = snmp_parse(device, vbs, TS, oids.STANDARD)
        speeds = {s.source.partition(":")[2]: s.value for s in p.samples if s.metric == "speed_bps" and s.value}
        return {"links": [link.to_json() for link in snmp_lldp.links_from_snmp(device, vbs, speeds, p.if_names)]}
    if kind == "netconf":
        model = next(m for m in models.MODELS if m.name == meta["model"])
        n = netconf_parse(device, (case / "reply.xml").read_bytes(), model, TS)
        return {"samples": [s.to_json() for s in n.samples], "problems": n.problems, "epochs": n.counter_epoch}
    if kind == "gnmi":
        msgs = read_gnmi(case / "responses.json")
        g = gnmi_parse(device, [m.update for m in msgs if m.HasField("update")])
        return {"samples": [s.to_json() for s in g.samples], "problems": g.problems,
                "epochs": {k: str(v) for k, v in g.counter_epoch.items()}}  # fmt: skip
    raise ValueError(kind)


def cases() -> list[tuple[str, Path]]:
    return [
        (kind, case)
        for kind in ("snmp", "lldp", "netconf", "gnmi")
        for case in sorted((FIXTURES / kind).iterdir())
        if case.is_dir()
    ]


if __name__ == "__main__":  # regenerate expected.json after a reviewed mapping change
    for kind, case in cases():
        (case / "expected.json").write_text(json.dumps(run_case(kind, case), indent=1, sort_keys=True) + "\n")
        print("wrote", case / "expected.json")
