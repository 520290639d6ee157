"""#46 item 5: one value must never stop a collector. A 20-digit counter (past 2**64 - 1: no device
counts that far, so it is a corrupt value, not a big count) and one value that is not a number (or
not JSON) are each skipped and named with the device; every other value of the reply is kept.

gNMI runs over a real gRPC target replaying the notifications; ethtool runs the real subprocess
path (a script stands in for the ethtool binary, which cannot print these values) over a sysfs
tree; SNMP and NETCONF feed their parsers the decoded varbinds / reply XML the collectors hand them;
``fabricscope parse`` runs as a process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

from fabricscope.collectors.host.nic import NicCollector, SubprocessEthtool
from fabricscope.collectors.switch.gnmi.client import GnmiCollector
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.netconf import models
from fabricscope.collectors.switch.netconf.parse import parse as netconf_parse
from fabricscope.collectors.switch.snmp.parse import parse as snmp_parse
from tests.switch.gnmi_server import ReplayTarget, serve

ROOT = Path(__file__).resolve().parents[2]
HUGE = "99999999999999999999"  # 20 digits, > 2**64 - 1
GOOD = {"e1": 1111, "e2": 2222, "e3": 3333}


def _values(samples, metric):
    return {s.source.rpartition(":")[2]: s.value for s in samples if s.metric == metric}


# ---- gNMI: the subscription lives on ----

def _note(itf: str, leaf: str, raw: bytes, ts: int) -> gnmi_pb2.SubscribeResponse:
    path = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces"),
                               gnmi_pb2.PathElem(name="interface", key={"name": itf}),
                               gnmi_pb2.PathElem(name="state"), gnmi_pb2.PathElem(name="counters"),
                               gnmi_pb2.PathElem(name=leaf)])  # fmt: skip
    n = gnmi_pb2.Notification(timestamp=ts, update=[gnmi_pb2.Update(path=path, val=gnmi_pb2.TypedValue(
        json_ietf_val=raw))])
    return gnmi_pb2.SubscribeResponse(update=n)


def _responses() -> list[gnmi_pb2.SubscribeResponse]:
    out = [_note("e1", "in-octets", b"1111", 1), _note("e2", "in-octets", HUGE.encode(), 2),
           _note("e3", "in-octets", b"{not json", 3)]
    out += [_note(itf, "out-octets", str(v).encode(), 4 + i) for i, (itf, v) in enumerate(GOOD.items())]
    return out


def _gnmi_device(port: int):
    return parse_inventory({"devices": [{"name": "spine1", "address": "127.0.0.1", "protocols": ["gnmi"],
                                         "interval": 2, "timeout": 1, "gnmi": {"port": port, "tls": False}}]}
                           ).devices[0]  # fmt: skip


def test_gnmi_one_bad_value_is_named_and_the_subscription_lives_on(caplog):
    async def go():
        target = ReplayTarget(_responses(), hold_open=True)
        server, port = await serve(target)
        try:
            once = await GnmiCollector(_gnmi_device(port)).poll()
            got: list = []
            states: list[bool] = []

            async def emit(r):
                got.append(r)

            task = asyncio.ensure_future(GnmiCollector(_gnmi_device(port)).run(
                emit, states.append, lambda: 0.1, lambda: None))
            for _ in range(100):
                if sum(len(r.samples) for r in got) >= 4:
                    break
                await asyncio.sleep(0.05)
            alive = not task.done()
            task.cancel()
            return once, got, alive, target.connections
        finally:
            await server.stop(None)

    with caplog.at_level(logging.WARNING):
        once, streamed, alive, connections = asyncio.run(go())
    assert _values(once.samples, "rx_bytes_total") == {"e1": 1111.0}
    assert _values(once.samples, "tx_bytes_total") == {k: float(v) for k, v in GOOD.items()}
    named = " ".join(once.problems)
    assert "spine1" in named and "e2" in named and HUGE in named and "e3" in named and "not JSON" in named
    assert alive and connections == 2  # the stream was never torn down by the bad values
    assert sum(len(r.samples) for r in streamed) == 4  # e1 in, e1-e3 out


# ---- SNMP: the rest of the poll is kept ----

def test_snmp_one_bad_value_is_named_and_the_poll_kept():
    names = [(f"1.3.6.1.2.1.31.1.1.1.1.{i}", f"e{i}".encode()) for i in (1, 2, 3)]
    hc_in = [("1.3.6.1.2.1.31.1.1.1.6.1", 1111), ("1.3.6.1.2.1.31.1.1.1.6.2", int(HUGE)),
             ("1.3.6.1.2.1.31.1.1.1.6.3", b"not a number")]
    hc_out = [(f"1.3.6.1.2.1.31.1.1.1.10.{i}", v) for i, v in enumerate(GOOD.values(), 1)]
    poll = snmp_parse("leaf3", [*names, *hc_in, *hc_out], 1.0)
    assert _values(poll.samples, "rx_bytes_total") == {"e1": 1111.0}
    assert _values(poll.samples, "tx_bytes_total") == {k: float(v) for k, v in GOOD.items()}
    named = " ".join(poll.problems)
    assert HUGE in named and "1.3.6.1.2.1.31.1.1.1.6.3" in named


# ---- NETCONF: the rest of the reply is kept ----

def _junos_entry(name: str, rx: str, tx: int) -> str:
    return (f"<physical-interface><name>{name}</name><oper-status>up</oper-status><traffic-statistics>"
            f"<input-bytes>{rx}</input-bytes><output-bytes>{tx}</output-bytes><input-packets>1</input-packets>"
            f"<output-packets>1</output-packets></traffic-statistics></physical-interface>")


def test_netconf_one_bad_value_is_named_and_the_reply_kept():
    body = "".join(_junos_entry(n, rx, GOOD[n]) for n, rx in (("e1", "1111"), ("e2", HUGE), ("e3", "n/a")))
    reply = ('<rpc-reply xmlns:junos="http://xml.juniper.net/junos/22.4R0/junos"><interface-information '
             f'xmlns="http://xml.juniper.net/junos/22.4R0/junos-interface">{body}</interface-information></rpc-reply>')
    poll = netconf_parse("qfx1", reply, models.JUNOS, 1.0)
    assert _values(poll.samples, "rx_bytes_total") == {"e1": 1111.0}
    assert _values(poll.samples, "tx_bytes_total") == {k: float(v) for k, v in GOOD.items()}
    named = " ".join(poll.problems)
    assert "qfx1:e2" in named and HUGE in named and "qfx1:e3" in named and "'n/a'" in named


# ---- ethtool: every interface read, the bad keys named ----

def _sysfs(root: Path) -> None:
    for itf in GOOD:
        d = root / "class/net" / itf
        (d / "statistics").mkdir(parents=True)
        (d / "operstate").write_text("up\n")
        (d / "carrier").write_text("1\n")
        (d / "statistics/tx_bytes").write_text(f"{GOOD[itf]}\n")
        (d / "statistics/rx_bytes").write_text({"e1": "1111\n", "e2": HUGE + "\n", "e3": "garbage\n"}[itf])


def _ethtool_script(path: Path) -> Path:
    stats = {"e1": "7", "e2": HUGE, "e3": "n/a"}
    body = "NIC statistics:\\n     rx_pause_ctrl_phy: {v}\\n     tx_pause_ctrl_phy: 5\\n"
    cases = "\n".join(f'  {itf}) printf "{body.format(v=v)}";;'
                      for itf, v in stats.items())
    path.write_text(f'#!/bin/sh\nif [ "$1" = "-i" ]; then echo "driver: mlx5_core"; exit 0; fi\ncase "$2" in\n{cases}\n'
                    "esac\n")
    path.chmod(0o755)
    return path


def test_ethtool_one_bad_value_is_named_and_every_interface_read(tmp_path, caplog):
    _sysfs(tmp_path / "sys")
    ethtool = SubprocessEthtool(str(_ethtool_script(tmp_path / "et")))
    nic = NicCollector("gpu7", sys_root=tmp_path / "sys", ethtool=ethtool)
    with caplog.at_level(logging.WARNING):
        samples = nic.poll()
    assert _values(samples, "tx_bytes_total") == {k: float(v) for k, v in GOOD.items()}
    assert _values(samples, "rx_bytes_total") == {"e1": 1111.0}
    assert _values(samples, "rx_pause_frames_total") == {"e1": 7.0}
    assert _values(samples, "tx_pause_frames_total") == {"e1": 5.0, "e2": 5.0, "e3": 5.0}
    logged = caplog.text
    assert "gpu7:e2" in logged and HUGE in logged and "gpu7:e3" in logged and "'garbage" in logged
    # the parser's problem line, logged once with the device and interface named (selfmetrics.report_problems)
    assert "gpu7:e2: ethtool-S: line not 'key: count', skipped: rx_pause_ctrl_phy: " in logged
    assert "gpu7:e3: ethtool-S: line not 'key: count', skipped: rx_pause_ctrl_phy: " in logged and "'n/a'" in logged


# ---- fabricscope parse: a problem line, never a traceback ----

def test_parse_names_one_bad_value_and_keeps_the_rest(tmp_path):
    events = [{"source": "leaf9", "timestamp": 1_700_000_000_000_000_000 + i, "updates": [
        {"Path": f"interfaces/interface[name={itf}]/state/counters/in-octets",
         "values": {"interfaces/interface/state/counters/in-octets": raw}}]}
        for i, (itf, raw) in enumerate((("e1", "1111"), ("e2", HUGE), ("e3", "not-a-number")))]  # fmt: skip
    (tmp_path / "gnmic.json").write_text("\n".join(json.dumps(e) for e in events))
    notes = [{"update": {"timestamp": "1", "update": [{"path": {"elem": [
        {"name": "interfaces"}, {"name": "interface", "key": {"name": itf}}, {"name": "state"},
        {"name": "counters"}, {"name": "out-octets"}]}, "val": {"jsonIetfVal": raw}}]}}
        for itf, raw in (("e1", "MTIzNA=="), ("e2", "e25vdCBqc29u"))]  # "1234", "{not json"  # fmt: skip
    (tmp_path / "gnmi.json").write_text(json.dumps(notes))
    for name, want in (("gnmic.json", {"e1": 1111.0}), ("gnmi.json", {"e1": 1234.0})):
        r = subprocess.run([sys.executable, "-m", "fabricscope", "parse", "-d", "leaf9", str(tmp_path / name)],
                           capture_output=True, text=True, cwd=ROOT, check=False)  # fmt: skip
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        got = {line["source"].rpartition(":")[2]: line["value"] for line in lines}
        assert got == want
        (head,) = [line for line in r.stderr.splitlines() if line.startswith("summary ")]
        summary = json.loads(head.partition(" ")[2])
        assert any("leaf9" in p and "e2" in p for p in summary["problems"]), summary
