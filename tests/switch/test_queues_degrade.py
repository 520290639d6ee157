"""A SONiC target that refuses (or breaks) the COUNTERS_DB Subscribe: the poll keeps the OpenConfig
interface counters and says what was lost, with the device name; the OpenConfig Subscribe failing
still fails the poll. Replayed over a real gRPC gNMI target."""

from __future__ import annotations

import asyncio
import json
import logging

import grpc
import pytest

from fabricscope.collectors.switch.gnmi.client import GnmiCollector
from fabricscope.collectors.switch.gnmi.proto import gnmi_pb2
from fabricscope.core.errors import CollectionError
from tests.switch.fixture_io import FIXTURES, read_gnmi
from tests.switch.gnmi_server import ReplayTarget, serve
from tests.switch.test_gnmi_wire import _device

OC = FIXTURES / "gnmi" / "sonic-ethernet35-oc-counters"
SONIC_MODELS = ("openconfig-interfaces", "sonic-db")


class RefusingTarget(ReplayTarget):
    """Aborts a Subscribe whose prefix target is in ``refuse`` with the given status, as a target
    without the SONiC virtual-db paths (or an ACL) would; everything else is replayed."""

    def __init__(self, *args, refuse: dict[str, grpc.StatusCode], **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.refuse = refuse

    async def Subscribe(self, request_iterator, context):  # type: ignore[no-untyped-def]  # noqa: N802
        req = await anext(aiter(request_iterator))
        target = req.subscribe.prefix.target
        if target in self.refuse:
            self.requests.append(req)
            await context.abort(self.refuse[target], f"no such path for target {target}")
        async for r in super().Subscribe(_again(req), context):
            yield r


async def _again(req: gnmi_pb2.SubscribeRequest):  # type: ignore[no-untyped-def]
    yield req


async def _poll(target: ReplayTarget):  # type: ignore[no-untyped-def]
    server, port = await serve(target)
    try:
        return await GnmiCollector(_device(port, encoding="json_ietf")).poll()
    finally:
        await server.stop(None)


def _expected_oc() -> list[dict]:
    exp = json.loads((OC / "expected.json").read_text())["samples"]
    return [{**s, "source": s["source"].replace("sw1:", "spine1:")} for s in exp]


def test_a_refused_counters_db_subscribe_keeps_the_interface_counters(caplog):
    target = RefusingTarget(read_gnmi(OC / "responses.json"), models=SONIC_MODELS,
                            refuse={"COUNTERS_DB": grpc.StatusCode.NOT_FOUND})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="fabricscope.collectors.switch.gnmi.client"):
        result = asyncio.run(_poll(target))
    assert sorted(r.subscribe.prefix.target for r in target.requests) == ["", "COUNTERS_DB"]  # both were asked
    assert [s.to_json() for s in result.samples] == _expected_oc()
    assert len(result.problems) == 1 and "COUNTERS_DB" in result.problems[0] and "NOT_FOUND" in result.problems[0]
    warned = [r.getMessage() for r in caplog.records if "COUNTERS_DB" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("spine1: ")


def test_an_error_response_on_the_counters_db_stream_keeps_the_interface_counters():
    broken = [gnmi_pb2.SubscribeResponse(error=gnmi_pb2.Error(code=5, message="COUNTERS_DB: table not found"))]
    target = ReplayTarget(read_gnmi(OC / "responses.json"), models=SONIC_MODELS, by_target={"COUNTERS_DB": broken})
    result = asyncio.run(_poll(target))
    assert [s.to_json() for s in result.samples] == _expected_oc()
    assert any("table not found" in p for p in result.problems)


def test_a_refused_openconfig_subscribe_still_fails_the_poll():
    target = RefusingTarget(read_gnmi(OC / "responses.json"), models=SONIC_MODELS,
                            refuse={"": grpc.StatusCode.PERMISSION_DENIED})  # fmt: skip
    with pytest.raises(CollectionError, match="PERMISSION_DENIED"):
        asyncio.run(_poll(target))


def test_streaming_keeps_the_openconfig_stream_open_after_the_counters_db_refusal():
    """``run`` mode: the refusal is emitted as a problem while the OpenConfig stream stays up."""
    target = RefusingTarget(read_gnmi(OC / "responses.json"), models=SONIC_MODELS,
                            refuse={"COUNTERS_DB": grpc.StatusCode.UNAVAILABLE})  # fmt: skip

    async def go():  # type: ignore[no-untyped-def]
        server, port = await serve(target)
        got_samples, got_problem = asyncio.Event(), asyncio.Event()
        seen: list = []

        async def emit(r):  # type: ignore[no-untyped-def]
            seen.append(r)
            if r.samples:
                got_samples.set()
            if r.problems:
                got_problem.set()

        task = asyncio.ensure_future(GnmiCollector(_device(port, encoding="json_ietf")).stream(emit))
        try:
            await asyncio.wait_for(asyncio.gather(got_samples.wait(), got_problem.wait()), 30)
            still_up = not task.done()  # the OpenConfig stream is held open by the target
        finally:
            task.cancel()
            await server.stop(None)
        return still_up, seen

    still_up, seen = asyncio.run(go())
    assert still_up
    assert [s.to_json() for r in seen for s in r.samples] == _expected_oc()
    assert any("UNAVAILABLE" in p for r in seen for p in r.problems)
