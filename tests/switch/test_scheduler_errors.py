"""The scheduler tells an unreachable device, a malformed reply and a bug of ours apart: only the
first marks the device down and backs off."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fabricscope.collectors.switch.base import PollResult
from fabricscope.collectors.switch.inventory import Device, parse_inventory
from fabricscope.collectors.switch.scheduler import SwitchScheduler
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now
from tests.switch.test_gnmi_wire import ListSink


class ScriptedCollector:
    """Answers each poll with the next scripted outcome: a PollResult, or an exception to raise."""

    def __init__(self, device: Device, script: list[PollResult | BaseException]) -> None:
        self.name = device.name
        self.script = script

    async def poll(self) -> PollResult:
        outcome = self.script.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def aclose(self) -> None:
        return None


def _scheduler(*script: PollResult | BaseException) -> tuple[SwitchScheduler, ListSink]:
    device = parse_inventory({"devices": [{"name": "leaf7", "address": "127.0.0.1", "protocols": ["gnmi"],
                                           "interval": 5, "timeout": 1, "gnmi": {"port": 1, "tls": False}}]}).devices[0]
    sink = ListSink()
    sched = SwitchScheduler([device], sink, max_backoff=60,
                            factories={"gnmi": lambda d: ScriptedCollector(d, list(script))})
    return sched, sink


def _good() -> PollResult:
    return PollResult([Sample(now(), "leaf7:Ethernet1", "rx_bytes_total", 42.0, {})])


def _up(sink: ListSink) -> list[float]:
    return [s["value"] for s in sink.items if s["metric"] == "collector_up"]


def _poll_twice(sched: SwitchScheduler) -> tuple[bool, bool]:
    async def go() -> tuple[bool, bool]:
        first = await sched.poll(sched.targets[0])
        second = await sched.poll(sched.targets[0])
        return first, second

    return asyncio.run(go())


def test_unreachable_device_is_marked_down_and_backs_off(caplog: pytest.LogCaptureFixture) -> None:
    sched, sink = _scheduler(CollectionError("leaf7: no SNMP response after 2 tries"), _good())
    with caplog.at_level(logging.INFO, "fabricscope.switch"):
        first, second = _poll_twice(sched)
    target = sched.targets[0]
    assert (first, second) == (False, False)  # the second poll falls in the backoff window
    assert target.failures == 1 and target.backoff.failures == 1 and target.bugs == 0
    assert _up(sink) == [0.0]
    assert any("leaf7/gnmi: poll failed" in r.getMessage() and r.exc_info is None for r in caplog.records)


def test_malformed_reply_is_skipped_and_device_stays_up(caplog: pytest.LogCaptureFixture) -> None:
    sched, sink = _scheduler(ParseError("reply is not XML"), _good())
    with caplog.at_level(logging.WARNING, "fabricscope.switch"):
        first, second = _poll_twice(sched)
    target = sched.targets[0]
    assert (first, second) == (True, True)  # no backoff: the next poll goes ahead and is kept
    assert target.failures == 0 and target.backoff.failures == 0 and target.bugs == 0
    assert _up(sink) == [1.0, 1.0]
    assert [s["value"] for s in sink.items if s["metric"] == "rx_bytes_total"] == [42.0]
    assert any("leaf7/gnmi: malformed reply skipped: reply is not XML" in r.getMessage() for r in caplog.records)


def test_bug_is_logged_with_traceback_counted_and_device_not_blamed(caplog: pytest.LogCaptureFixture) -> None:
    sched, sink = _scheduler(KeyError("ifHCInOctets"), _good())
    with caplog.at_level(logging.WARNING, "fabricscope.switch"):
        first, second = _poll_twice(sched)
    target = sched.targets[0]
    assert (first, second) == (False, True)  # no backoff after a bug: the next poll runs
    assert target.bugs == 1 and target.failures == 0 and target.backoff.failures == 0
    assert 0.0 not in _up(sink)
    crash = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(crash) == 1 and "leaf7/gnmi" in crash[0].getMessage()
    assert crash[0].exc_info is not None and crash[0].exc_info[0] is KeyError


def test_a_problem_is_logged_once_per_device_and_counted_every_poll(caplog: pytest.LogCaptureFixture) -> None:
    from fabricscope.collectors import selfmetrics

    bad = "e2 in-octets: 99999999999999999999 is out of a 64-bit counter's range"
    again = bad.replace("99999999999999999999", "99999999999999999998")  # the same problem, another value
    sched, sink = _scheduler(PollResult(_good().samples, problems=[bad]), PollResult(_good().samples, problems=[again]))
    reg = selfmetrics.REGISTRY
    assert reg is not None
    old, new = ("fabricscope_collector_problems_total", {"device": "leaf7", "protocol": "gnmi"}), (
        "fabricscope_collector_parse_problems_total", {"device": "leaf7", "format": "gnmi"})
    before = [reg.get_sample_value(*m) or 0.0 for m in (old, new)]
    with caplog.at_level(logging.WARNING):
        assert _poll_twice(sched) == (True, True)
    assert [r.getMessage() for r in caplog.records if "range" in r.getMessage()] == [f"leaf7: gnmi: {bad}"]
    # one idea, one function: the host agent's counter counts it, and the older name keeps counting too
    assert [reg.get_sample_value(*m) for m in (old, new)] == [b + 2 for b in before]
