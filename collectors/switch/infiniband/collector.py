"""The ``infiniband`` protocol of ``fabricscope collect``: one fabric sweep per poll (see :mod:`.sweep`)."""

from __future__ import annotations

from ..base import PollResult
from ..inventory import Device
from .sweep import FabricSweep, Runner, run_command


class InfinibandCollector:
    def __init__(self, device: Device, runner: Runner = run_command) -> None:
        settings = device.infiniband
        assert settings is not None  # the inventory refuses protocol infiniband without the block
        self.device = device
        self.name = f"{device.name}/infiniband"
        self.sweep = FabricSweep(
            runner, ca=settings.ca, ca_port=settings.ca_port, max_mads_per_second=settings.max_mads_per_second,
            deadline_s=settings.sweep_deadline, topology_every=settings.topology_every,
        )

    async def poll(self) -> PollResult:
        r = await self.sweep.sweep()
        return PollResult(r.samples, r.links, r.problems)

    async def aclose(self) -> None:
        return None
