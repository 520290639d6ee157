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

    def _drop(self) -> None:
        mgr, self._mgr = self._mgr, None
        if mgr is not None:
            with contextlib.suppress(Exception):  # the session is already broken; nothing to tidy
                mgr.close_session()

    def fetch(self) -> tuple[str, str | None]:
        with self._lock:
            if self._mgr is None or not self._mgr.connected:
                self._mgr = self._connect()
            assert self.model is not None
            reply = self._get(self.model.filter)
            lldp_reply = self._get(LLDP_FILTER) if self.device.lldp and self.has_lldp else None
            return reply, lldp_reply

    async def poll(self) -> PollResult:
        ts = now()
        reply, lldp_reply = await asyncio.to_thread(self.fetch)
        assert self.model is not None
        try:
            parsed = parse(self.device.name, reply, self.model, ts, self.device.wants)
        except ParseError as exc:  # the interfaces reply is unusable; the LLDP one may still be fine
            result = PollResult(problems=[str(exc)])
            samples: list[Sample] = []
        else:
            samples = self.resets.mark(parsed.samples, epochs=parsed.counter_epoch)
            result = PollResult(samples, problems=parsed.problems)
        if lldp_reply is not None:
            try:
                rows = lldp_rows(lldp_reply)
                result.links = lldp.links_from_openconfig(self.device.name, rows, speeds_of(samples))
            except ParseError as exc:
                result.problems.append(str(exc))
        return result

    async def aclose(self) -> None:
        await asyncio.to_thread(self._drop)
