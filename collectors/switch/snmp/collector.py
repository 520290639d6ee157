"""SNMP collector for one device: fetch (parallel GETBULK) → parse → reset marking → LLDP links."""

from __future__ import annotations

from collectors.core import now

from .. import lldp
from ..base import PollResult, speeds_of
from ..inventory import Device
from ..resets import ResetTracker
from . import oids
from .fetch import SnmpClient
from .parse import parse


class SnmpCollector:
    def __init__(self, device: Device) -> None:
        self.device = device
        self.name = f"{device.name}/snmp"
        self.columns = oids.columns_for(device.vendor)
        walk = {c.oid for c in self.columns} | {oids.IF_NAME, oids.IF_DESCR, oids.IF_COUNTER_DISCONTINUITY}
        if device.lldp:
            walk |= set(oids.LLDP_COLUMNS)
        self.walk_columns = sorted(walk)
        self.client = SnmpClient(device)
        self.resets = ResetTracker()

    async def poll(self) -> PollResult:
        ts = now()
        varbinds = await self.client.walk(self.walk_columns, [oids.SYS_UPTIME])
        parsed = parse(self.device.name, varbinds, ts, self.columns, self.device.wants)
        restarted = self.resets.agent_restarted(self.device.name, parsed.uptime_ticks, ts)
        samples = self.resets.mark(parsed.samples, restarted, parsed.counter_epoch)
        links = []
        if self.device.lldp:
            links = lldp.links_from_snmp(self.device.name, varbinds, speeds_of(samples), parsed.if_names)
        return PollResult(samples, links, parsed.problems)

    async def aclose(self) -> None:
        self.client.close()
