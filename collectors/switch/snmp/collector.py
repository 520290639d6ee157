"""SNMP collector for one device: fetch (parallel GETBULK) → parse → reset marking → LLDP links."""

from __future__ import annotations

from typing import Literal

from fabricscope.core.model import now

from ..base import PollResult, speeds_of
from ..inventory import Device
from ..resets import ResetTracker
from . import oids
from .fetch import SnmpClient
from .lldp import links_from_snmp
from .parse import parse
from .plan import REPROBE_EVERY, WalkPlan

_LLDP_MIB = "1.0.8802."  # every LLDP-MIB column (oids.LLDP_COLUMNS) is under it


class SnmpCollector:
    def __init__(self, device: Device, engine: Literal["auto", "pysnmp"] = "auto", prune: bool = True) -> None:
        self.device = device
        self.name = f"{device.name}/snmp"
        self.columns = oids.columns_for(device.vendor)
        extra = [oids.IF_NAME, oids.IF_DESCR, oids.IF_COUNTER_DISCONTINUITY]
        if device.lldp:
            extra += oids.LLDP_COLUMNS
        # prune=False walks every column every poll (the reference the planned polls are tested against)
        self.plan = WalkPlan(self.columns, extra, reprobe_every=REPROBE_EVERY if prune else 1,
                             always=oids.LLDP_COLUMNS if device.lldp else ())
        self.walk_columns = self.plan.all
        self.client = SnmpClient(device, engine)
        self.resets = ResetTracker()

    async def poll(self) -> PollResult:
        ts = now()
        walk, full = self.plan.next_walk()
        varbinds = await self.client.walk(walk, [oids.SYS_UPTIME])
        parsed = parse(self.device.name, varbinds, ts, self.columns, self.device.wants)
        restarted = self.resets.agent_restarted(self.device.name, parsed.uptime_ticks, ts)
        self.plan.observe(varbinds, full, restarted, frozenset(parsed.if_names))
        samples = self.resets.mark(parsed.samples, restarted, parsed.counter_epoch)
        links = []
        if self.device.lldp:
            mib = [vb for vb in varbinds if vb[0].startswith(_LLDP_MIB)]  # lldp scans what it gets per column
            links = links_from_snmp(self.device.name, mib, speeds_of(samples), parsed.if_names)
        return PollResult(samples, links, parsed.problems)

    async def aclose(self) -> None:
        self.client.close()
