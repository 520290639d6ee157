"""NETCONF collector for one device: one SSH session reused across polls, model from capabilities.

ncclient is synchronous; each poll runs it in a worker thread so one slow device does not stall the
event loop the other devices share. The session is dropped on any error and reopened next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ncclient import manager
from ncclient.operations.rpc import RPCError

from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now

from .. import lldp
from ..base import PollResult, speeds_of
from ..inventory import Device
from ..resets import ResetTracker
from . import models
from .parse import LLDP_FILTER, OC_LLDP, lldp_rows, parse


class RpcRefused(CollectionError):
    """The device answered a vendor RPC with <rpc-error>: the session itself is fine."""


class NetconfCollector:
    def __init__(self, device: Device) -> None:
        if device.netconf is None:
            raise CollectionError(f"{device.name}: no netconf settings")
        self.device = device
        self.settings = device.netconf
        self.name = f"{device.name}/netconf"
        self._mgr: Any = None
        self._lock = threading.Lock()
        self.model: models.Model | None = None
        self.extra_models: list[models.Model] = []  # e.g. openconfig-qos, when advertised
        self.has_lldp = False
        self.resets = ResetTracker()

    def _connect(self) -> Any:
        s = self.settings
        password = self.device.secret(s.password)
        try:
            mgr = manager.connect(
                host=self.device.address,
                port=s.port,
                username=s.username,
                password=password.get_secret_value() if password else None,
                key_filename=str(s.key_file) if s.key_file else None,
                hostkey_verify=s.hostkey_verify,
                ssh_config=None,
                allow_agent=False,
                look_for_keys=False,
                timeout=self.device.timeout,
            )
        except Exception as exc:  # ncclient raises many unrelated types (socket, paramiko, SSHError)
            why = f"{type(exc).__name__}: {exc}"
            raise CollectionError(f"{self.device.name}: NETCONF connect failed: {why}") from exc
        caps = list(mgr.server_capabilities)
        self.model = models.choose(caps)
        self.extra_models = models.extras(caps)
        self.has_lldp = any(OC_LLDP in c or "openconfig-lldp" in c for c in caps)
        if self.model is None:
            mgr.close_session()
            raise CollectionError(f"{self.device.name}: server advertises no supported interfaces model")
        return mgr

    def _get(self, filter_xml: str) -> str:
        try:
            return str(self._mgr.get(filter=("subtree", filter_xml)).xml)
        except RPCError as exc:
            raise CollectionError(f"{self.device.name}: <get> failed: {exc}") from exc
        except Exception as exc:
            self._drop()
            why = f"{type(exc).__name__}: {exc}"
            raise CollectionError(f"{self.device.name}: NETCONF session lost: {why}") from exc

    def _rpc(self, rpc_xml: str) -> str:
        try:
            return str(self._mgr.dispatch(rpc_xml).xml)
        except RPCError as exc:
            raise RpcRefused(f"{self.device.name}: RPC {rpc_xml} refused: {exc}") from exc
        except Exception as exc:
            self._drop()
            why = f"{type(exc).__name__}: {exc}"
            raise CollectionError(f"{self.device.name}: NETCONF session lost: {why}") from exc

    def _replies(self, model: models.Model, problems: list[str]) -> list[tuple[models.Model, str]]:
        if not model.rpcs:
            return [(model, self._get(model.filter))]
        out = [(model, self._rpc(model.rpcs[0]))]
        for rpc in model.rpcs[1:]:  # optional detail (queue RPC): a platform without it keeps the rest
            try:
                out.append((model, self._rpc(rpc)))
            except RpcRefused as exc:
                problems.append(str(exc))
        return out

    def _drop(self) -> None:
        mgr, self._mgr = self._mgr, None
        if mgr is not None:
            with contextlib.suppress(Exception):  # the session is already broken; nothing to tidy
                mgr.close_session()

    def fetch(self) -> tuple[list[tuple[models.Model, str]], str | None, list[str]]:
        """(model, reply) for the interfaces model and each extra one, the LLDP reply, and the
        optional requests the device refused."""
        with self._lock:
            if self._mgr is None or not self._mgr.connected:
                self._mgr = self._connect()
            assert self.model is not None
            problems: list[str] = []
            replies = self._replies(self.model, problems)
            for extra in self.extra_models:  # an extra model refused: the interfaces are still good
                try:
                    replies.extend(self._replies(extra, problems))
                except CollectionError as exc:
                    if self._mgr is None:  # the session is gone, not just this request
                        raise
                    problems.append(str(exc))
            lldp_reply = self._get(LLDP_FILTER) if self.device.lldp and self.has_lldp else None
            return replies, lldp_reply, problems

    async def poll(self) -> PollResult:
        ts = now()
        replies, lldp_reply, problems = await asyncio.to_thread(self.fetch)
        result = PollResult(problems=problems)
        samples: list[Sample] = []
        epochs: dict[str, str] = {}
        for model, reply in replies:
            try:
                parsed = parse(self.device.name, reply, model, ts, self.device.wants)
            except ParseError as exc:  # this reply is unusable; the others may still be fine
                result.problems.append(str(exc))
                continue
            samples.extend(parsed.samples)
            epochs.update(parsed.counter_epoch)
            result.problems.extend(parsed.problems)
        samples = self.resets.mark(samples, epochs=epochs)
        result.samples = samples
        if lldp_reply is not None:
            try:
                rows = lldp_rows(lldp_reply)
                result.links = lldp.links_from_openconfig(self.device.name, rows, speeds_of(samples))
            except ParseError as exc:
                result.problems.append(str(exc))
        return result

    async def aclose(self) -> None:
        await asyncio.to_thread(self._drop)
