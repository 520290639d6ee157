"""Polling scheduler for switch collectors (APScheduler 3, asyncio).

Each polled device (SNMP, NETCONF) is an interval job with jitter, ``max_instances=1`` and a hard
timeout; each gNMI device is a long-lived subscription task. A failure never escapes a job and is
logged with the device name. Only an unreachable device (timeout, ``CollectionError``) sets
``collector_up`` to 0 and backs off exponentially (polls are skipped until its backoff expires); a
malformed reply (``ParseError``) is skipped with the device still up; any other exception is our bug:
logged with its traceback and counted in ``bugs``, the device not marked down. Every poll also emits
``collector_poll_duration_seconds``. Samples go to a sink (``submit(kind, item) -> bool``); LLDP
links go to ``publish_links`` whenever a device's set changes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from fabricscope.collectors.selfmetrics import observe_poll, report_problems
from fabricscope.collectors.sinks.sender import Sink
from fabricscope.core.backoff import Backoff
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now

from .base import PollResult, SwitchCollector
from .gnmi.client import GnmiCollector
from .infiniband.collector import InfinibandCollector
from .inventory import Device
from .lldp import Link
from .netconf.collector import NetconfCollector
from .snmp.collector import SnmpCollector

log = logging.getLogger("fabricscope.switch")

FACTORIES: dict[str, Callable[[Device], Any]] = {
    "snmp": SnmpCollector,
    "netconf": NetconfCollector,
    "gnmi": GnmiCollector,
    "infiniband": InfinibandCollector,
}




@dataclass
class _Target:
    device: Device
    protocol: str
    collector: Any
    backoff: Backoff
    links: frozenset[Link] = field(default_factory=frozenset)
    polls: int = 0
    failures: int = 0  # device unreachable: collector_up 0, backoff
    bugs: int = 0  # unexpected exceptions in our code: logged with a traceback, device not blamed


class SwitchScheduler:
    def __init__(
        self,
        devices: Iterable[Device],
        sink: Sink,
        publish_links: Callable[[list[Link]], None] | None = None,
        *,
        jitter: float = 0.1,
        max_backoff: float = 300.0,
        factories: dict[str, Callable[[Device], Any]] | None = None,
    ) -> None:
        self.sink = sink
        self.publish_links = publish_links
        self.jitter = jitter
        self.targets: list[_Target] = []
        make = factories or FACTORIES
        for d in devices:
            for proto in d.protocols:
                self.targets.append(_Target(d, proto, make[proto](d), Backoff(d.interval, max_backoff)))
        self._scheduler: AsyncIOScheduler | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # -- one poll of one target: never raises ------------------------------------------------------
    async def poll(self, t: _Target) -> bool:
        """Poll once; True when the device answered (even if part of its reply was malformed)."""
        if not t.backoff.ready():
            return False
        t.polls += 1
        start = time.monotonic()
        try:
            result: PollResult = await asyncio.wait_for(t.collector.poll(), timeout=t.device.timeout)
        except TimeoutError:
            log.warning("%s/%s: poll timed out after %.1fs", t.device.name, t.protocol, t.device.timeout)
            return self._down(t, time.monotonic() - start)
        except CollectionError as exc:
            log.warning("%s/%s: poll failed: %s", t.device.name, t.protocol, exc)
            return self._down(t, time.monotonic() - start)
        except ParseError as exc:
            # the device answered: its reply is at fault, not its reachability, so no backoff
            log.warning("%s/%s: malformed reply skipped: %s", t.device.name, t.protocol, exc)
            result = PollResult(problems=[])
        except Exception:
            # a bug of ours, not the device's: keep it visible and do not blame the device
            t.bugs += 1
            log.exception("%s/%s: poll crashed (bug %d)", t.device.name, t.protocol, t.bugs)
            return False
        t.backoff.succeeded()
        self._deliver(t, result)
        self._self_metrics(t, True, time.monotonic() - start)
        return True

    def _down(self, t: _Target, duration: float) -> bool:
        t.failures += 1
        delay = t.backoff.failed()
        log.info("%s/%s: backing off %.1fs (failure %d)", t.device.name, t.protocol, delay, t.backoff.failures)
        self._self_metrics(t, False, duration)
        return False

    def _deliver(self, t: _Target, result: PollResult) -> None:
        # the same problem comes back every poll (its numbers may change): logged once per device and
        # protocol, counted every time, by the one function the host agent's parsers report through too
        report_problems(t.device.name, t.protocol, result.problems, log, protocol=t.protocol)
        for s in result.samples:
            self.sink.submit("samples", s.to_json())
        links = frozenset(result.links)
        if links and links != t.links and self.publish_links is not None:
            try:
                self.publish_links(sorted(links, key=lambda link: (link.a, link.b)))
                t.links = links
            except CollectionError as exc:  # the API is unreachable or refused them: retried next change
                log.warning("%s: publishing %d LLDP links failed: %s", t.device.name, len(links), exc)
            except Exception:
                log.exception("%s: publishing %d LLDP links crashed", t.device.name, len(links))

    def _self_metrics(self, t: _Target, up: bool, duration: float | None) -> None:
        observe_poll(t.device.name, ok=up, seconds=duration or 0.0)
        labels = {"protocol": t.protocol}
        ts = now()
        self.sink.submit("samples", Sample(ts, t.device.name, "collector_up", 1.0 if up else 0.0, labels).to_json())
        if duration is not None:
            sample = Sample(ts, t.device.name, "collector_poll_duration_seconds", duration, labels)
            self.sink.submit("samples", sample.to_json())

    async def run_once(self) -> dict[str, bool]:
        """Poll every target once, concurrently (``--once``); gNMI targets read until sync."""
        results = await asyncio.gather(*(self.poll(t) for t in self.targets))
        return {f"{t.device.name}/{t.protocol}": ok for t, ok in zip(self.targets, results, strict=True)}

    # -- long-running mode -------------------------------------------------------------------------
    async def _stream(self, t: _Target) -> None:
        async def emit(result: PollResult) -> None:
            self._deliver(t, result)

        def on_state(up: bool) -> None:
            self._self_metrics(t, up, None)

        def backoff() -> float:
            return t.backoff.failed()

        await t.collector.run(emit, on_state, backoff, t.backoff.succeeded)

    def start(self) -> None:
        """Schedule every target on the running event loop."""
        self._scheduler = AsyncIOScheduler()
        for t in self.targets:
            if t.protocol == "gnmi":
                self._tasks.append(asyncio.get_running_loop().create_task(self._stream(t)))
                continue
            self._scheduler.add_job(
                self.poll,
                "interval",
                args=[t],
                seconds=t.device.interval,
                jitter=t.device.interval * self.jitter,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(t.device.interval)),
                # first poll soon, spread over the jitter window so devices do not fire in lock-step
                next_run_time=datetime.now() + timedelta(seconds=random.uniform(0, t.device.interval * self.jitter)),
                id=f"{t.device.name}/{t.protocol}",
            )
        self._scheduler.start()

    async def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in self.targets:
            try:
                await t.collector.aclose()
            except Exception as exc:
                log.debug("%s: close failed: %s", t.device.name, exc)


__all__ = ["SwitchCollector", "SwitchScheduler", "Sink"]
