"""gNMI collector for one device: a Subscribe STREAM kept open, reopened with backoff.

Counters are SAMPLEd at the device's interval, oper-status and LLDP neighbours are ON_CHANGE.
Each SubscribeResponse batch is parsed and handed to ``emit`` as a :class:`PollResult`; the
scheduler owns the backoff bookkeeping and ``collector_up`` via the callbacks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc

from fabricscope.core.errors import CollectionError, FabricscopeError

from .. import lldp
from ..base import PollResult, speeds_of
from ..inventory import Device
from ..resets import ResetTracker
from . import paths, sonic
from .parse import parse
from .proto import gnmi_pb2, gnmi_pb2_grpc

log = logging.getLogger(__name__)

_ENCODING = {"json_ietf": gnmi_pb2.JSON_IETF, "json": gnmi_pb2.JSON, "proto": gnmi_pb2.PROTO}


def path_of(text: str) -> gnmi_pb2.Path:
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=p) for p in text.strip("/").split("/") if p])


class GnmiCollector:
    def __init__(self, device: Device) -> None:
        if device.gnmi is None:
            raise CollectionError(f"{device.name}: no gnmi settings")
        self.device = device
        self.settings = device.gnmi
        self.name = f"{device.name}/gnmi"
        self.resets = ResetTracker()
        self.encodings: list[int] = []
        self.models: set[str] = set()  # model names from Capabilities: choose the extra paths
        self.sonic_names: dict[str, str] = {}  # SONiC object id → name, from the name maps seen

    def _channel(self) -> grpc.aio.Channel:
        target = f"{self.device.address}:{self.settings.port}"
        if not self.settings.tls:
            return grpc.aio.insecure_channel(target)
        root = self.settings.ca_file.read_bytes() if self.settings.ca_file else None
        options = []
        if self.settings.server_name:
            options.append(("grpc.ssl_target_name_override", self.settings.server_name))
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=root), options)

    def _metadata(self) -> list[tuple[str, str]]:
        password = self.device.secret(self.settings.password)
        if self.settings.username and password:
            return [("username", self.settings.username), ("password", password.get_secret_value())]
        return []

    def _subscribe(self, pairs: list[tuple[str, str]], target: str = "") -> gnmi_pb2.SubscribeRequest:
        interval_ns = int(self.device.interval * 1e9)
        subs = [
            gnmi_pb2.Subscription(
                path=path_of(p),
                mode=gnmi_pb2.SAMPLE if mode == "SAMPLE" else gnmi_pb2.ON_CHANGE,
                sample_interval=interval_ns if mode == "SAMPLE" else 0,
            )
            for p, mode in pairs
        ]
        wanted = _ENCODING[self.settings.encoding]
        encoding = wanted if not self.encodings or wanted in self.encodings else self.encodings[0]
        return gnmi_pb2.SubscribeRequest(
            subscribe=gnmi_pb2.SubscriptionList(
                prefix=gnmi_pb2.Path(target=target) if target else None,
                subscription=subs, mode=gnmi_pb2.SubscriptionList.STREAM, encoding=encoding,
            )
        )

    def request(self) -> gnmi_pb2.SubscribeRequest:
        pairs = [(p, m) for p, m in paths.SUBSCRIPTIONS if self.device.lldp or not p.startswith("/lldp")]
        for model, extra in paths.MODEL_SUBSCRIPTIONS.items():
            if model in self.models:
                pairs.extend(extra)
        return self._subscribe(pairs)

    def requests(self) -> list[gnmi_pb2.SubscribeRequest]:
        """The OpenConfig subscription, plus SONiC's COUNTERS_DB one when the target is SONiC."""
        out = [self.request()]
        if paths.SONIC_MODEL in self.models:
            out.append(self._subscribe(list(paths.SONIC_SUBSCRIPTIONS), target=sonic.TARGET))
        return out

    def _result(self, notification: gnmi_pb2.Notification) -> PollResult:
        batch = parse(self.device.name, [notification], self.device.wants, self.sonic_names)
        samples = self.resets.mark(batch.samples, epochs=batch.counter_epoch)
        rows = [(itf, state) for (itf, _), state in batch.lldp.items()]
        links = lldp.links_from_openconfig(self.device.name, rows, speeds_of(samples)) if rows else []
        return PollResult(samples, links, batch.problems)

    async def poll(self) -> PollResult:
        """One-shot: subscribe, gather until the target's ``sync_response``, hang up (``--once``)."""
        merged = PollResult()

        async def gather(r: PollResult) -> None:
            merged.samples.extend(r.samples)
            merged.links.extend(r.links)
            merged.problems.extend(r.problems)

        await self.stream(gather, until_sync=True)
        return merged

    async def aclose(self) -> None:
        return None

    async def stream(
        self,
        emit: Callable[[PollResult], Awaitable[None]],
        on_connected: Callable[[], None] | None = None,
        until_sync: bool = False,
    ) -> None:
        """Run one subscription until the stream ends or fails (then raise ``CollectionError``)."""
        metadata = self._metadata()
        async with self._channel() as channel:
            stub = gnmi_pb2_grpc.gNMIStub(channel)
            try:
                caps = await stub.Capabilities(
                    gnmi_pb2.CapabilityRequest(), metadata=metadata, timeout=self.device.timeout
                )
                self.encodings = list(caps.supported_encodings)
                self.models = {m.name for m in caps.supported_models}
                requests = self.requests()
                calls = [stub.Subscribe(iter([r]), metadata=metadata) for r in requests]
                if on_connected:
                    on_connected()
                try:
                    # one task per Subscribe; the first (OpenConfig) one ending or failing ends the stream,
                    # an extra one (SONiC COUNTERS_DB) failing only loses its own samples
                    first, *extras = calls
                    tasks = [asyncio.ensure_future(self._consume(first, emit, until_sync)),
                             *(asyncio.ensure_future(self._optional(c, r.subscribe.prefix.target, emit, until_sync))
                               for c, r in zip(extras, requests[1:], strict=True))]
                    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                    for task in pending:
                        task.cancel()
                    for task in done:
                        task.result()
                    if until_sync:
                        return
                finally:
                    for c in calls:
                        c.cancel()
            except grpc.aio.AioRpcError as exc:
                raise CollectionError(f"{self.device.name}: gNMI {exc.code().name}: {exc.details()}") from exc
        raise CollectionError(f"{self.device.name}: gNMI stream ended")

    async def _optional(self, call: grpc.aio.StreamStreamCall, target: str,
                        emit: Callable[[PollResult], Awaitable[None]], until_sync: bool) -> None:
        """An extra Subscribe: a refusal or a broken stream is logged and reported, the poll goes on."""
        try:
            await self._consume(call, emit, until_sync)
        except (grpc.aio.AioRpcError, CollectionError) as exc:
            why = (f"gNMI {exc.code().name}: {exc.details()}" if isinstance(exc, grpc.aio.AioRpcError)
                   else str(exc).removeprefix(f"{self.device.name}: "))  # fmt: skip
            what = f"subscription with target {target} failed, interface counters kept: {why}"
            log.warning("%s: %s", self.device.name, what)
            await emit(PollResult(problems=[what]))

    async def _consume(self, call: grpc.aio.StreamStreamCall, emit: Callable[[PollResult], Awaitable[None]],
                       until_sync: bool) -> None:
        async for resp in call:
            if resp.HasField("update"):
                try:
                    result = self._result(resp.update)
                except (ValueError, TypeError, ArithmeticError, FabricscopeError) as exc:
                    # parse names bad values itself; this is the net under it: one notification is
                    # lost, never the subscription
                    what = f"notification skipped, subscription kept: {type(exc).__name__}: {exc}"
                    log.warning("%s: %s", self.device.name, what)
                    result = PollResult(problems=[what])
                await emit(result)
            elif resp.sync_response and until_sync:
                return
            elif resp.HasField("error"):
                raise CollectionError(f"{self.device.name}: gNMI error {resp.error.message}")
        if not until_sync:
            raise CollectionError(f"{self.device.name}: gNMI stream ended")

    async def run(
        self,
        emit: Callable[[PollResult], Awaitable[None]],
        on_state: Callable[[bool], None],
        backoff: Callable[[], float],
        reset_backoff: Callable[[], None],
    ) -> None:
        """Keep the stream up forever: reconnect after ``backoff()`` seconds on every failure."""

        def connected() -> None:
            on_state(True)
            reset_backoff()

        while True:
            try:
                await self.stream(emit, on_connected=connected)
            except CollectionError as exc:
                log.warning("%s: %s", self.device.name, exc)
            except Exception:  # noqa: BLE001 - a bug in one stream must not end the reconnect loop for good
                log.exception("%s: gNMI stream failed; reconnecting", self.device.name)
            on_state(False)
            await asyncio.sleep(backoff())
