"""gNMI client against a real in-process gRPC target replaying recorded notifications."""

from __future__ import annotations

import asyncio
import json

import pytest

from fabricscope.collectors.switch.gnmi.client import GnmiCollector
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.collectors.switch.inventory import parse_inventory
from fabricscope.collectors.switch.scheduler import SwitchScheduler
from tests.switch.fixture_io import FIXTURES, read_gnmi
from tests.switch.gnmi_server import ReplayTarget, self_signed, serve


class ListSink:
    def __init__(self) -> None:
        self.items: list[dict] = []

    def submit(self, kind, item, job=None):
        assert kind == "samples"
        self.items.append(item)
        return True

    def flush(self):
        return True

    def close(self):
        pass


def _device(port: int, **gnmi):
    cfg = {"port": port, "tls": False, **gnmi}
    return parse_inventory({"devices": [{"name": "spine1", "address": "127.0.0.1", "protocols": ["gnmi"],
                                         "interval": 2, "timeout": 1, "gnmi": cfg}]}).devices[0]  # fmt: skip


def _expected(case: str) -> list[dict]:
    exp = json.loads((FIXTURES / "gnmi" / case / "expected.json").read_text())["samples"]
    return [{**s, "source": s["source"].replace("sw1:", "spine1:")} for s in exp]


async def _with_target(responses, fn, tls=None, hold_open=True):
    target = ReplayTarget(responses, hold_open=hold_open)
    server, port = await serve(target, tls)
    try:
        return target, await fn(port)
    finally:
        await server.stop(None)


def test_subscribe_over_the_wire_insecure():
    responses = read_gnmi(FIXTURES / "gnmi" / "ciena-oc-if-counters" / "responses.json")

    async def go(port):
        return await GnmiCollector(_device(port, encoding="json_ietf")).poll()

    target, result = asyncio.run(_with_target(responses, go))
    assert [s.to_json() for s in result.samples] == _expected("ciena-oc-if-counters")
    req = target.requests[0].subscribe
    assert req.mode == gnmi_pb2.SubscriptionList.STREAM and req.encoding == gnmi_pb2.JSON_IETF
    modes = {"/".join(e.name for e in s.path.elem): s.mode for s in req.subscription}
    assert modes["interfaces/interface/state/counters"] == gnmi_pb2.SAMPLE
    assert modes["interfaces/interface/state/oper-status"] == gnmi_pb2.ON_CHANGE
    counters = next(s for s in req.subscription if s.mode == gnmi_pb2.SAMPLE)
    assert counters.sample_interval == 2_000_000_000


def test_subscribe_over_tls_with_credentials(tmp_path, monkeypatch):
    cert, key = self_signed("gnmi.test")
    (tmp_path / "ca.pem").write_bytes(cert)
    monkeypatch.setenv("FS_GNMI_PW", "pw-s3cret")
    responses = read_gnmi(FIXTURES / "gnmi" / "sonic-ethernet35-oc-counters" / "responses.json")

    async def go(port):
        dev = _device(port, tls=True, ca_file=str(tmp_path / "ca.pem"), server_name="gnmi.test",
                      username="telemetry", password={"env": "FS_GNMI_PW"})  # fmt: skip
        return await GnmiCollector(dev).poll()

    target, result = asyncio.run(_with_target(responses, go, tls=(cert, key)))
    assert [s.to_json() for s in result.samples] == _expected("sonic-ethernet35-oc-counters")
    assert target.metadata[0]["username"] == "telemetry" and target.metadata[0]["password"] == "pw-s3cret"


def test_stream_reconnects_with_backoff_and_reports_up_down():
    responses = read_gnmi(FIXTURES / "gnmi" / "sonic-ethernet35-oc-counters" / "responses.json")
    sink = ListSink()

    async def go(port):
        sched = SwitchScheduler([_device(port)], sink, max_backoff=0.3)
        sched.targets[0].backoff.base = 0.1  # keep the test short; the policy is the same
        sched.start()
        await asyncio.sleep(1.5)
        await sched.stop()

    target, _ = asyncio.run(_with_target(responses, go, hold_open=False))
    assert target.connections >= 3  # the target hangs up after each replay; we keep coming back
    ups = [s["value"] for s in sink.items if s["metric"] == "collector_up"]
    assert 1.0 in ups and 0.0 in ups
    assert sum(s["metric"] == "rx_bytes_total" for s in sink.items) >= 3


def test_unreachable_target_backs_off():
    sink = ListSink()

    async def go():
        sched = SwitchScheduler([_device(1)], sink, max_backoff=0.2)
        ok = await sched.run_once()
        await sched.stop()
        return ok, sched.targets[0].backoff.failures

    ok, failures = asyncio.run(go())
    assert ok == {"spine1/gnmi": False} and failures == 1
    assert [s["value"] for s in sink.items if s["metric"] == "collector_up"] == [0.0]


@pytest.mark.parametrize("encoding", ["json_ietf", "proto"])
def test_encoding_choice_follows_capabilities(encoding):
    dev = _device(1, encoding=encoding)
    c = GnmiCollector(dev)
    c.encodings = [gnmi_pb2.JSON_IETF]
    assert c.request().subscribe.encoding == gnmi_pb2.JSON_IETF
