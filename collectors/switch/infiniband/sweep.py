"""A bounded InfiniBand fabric sweep: topology every N sweeps, then switch-port counters under a
MAD rate limit and a per-sweep deadline, resuming where the last sweep stopped.

A fabric of thousands of switch ports must not be flooded with PMA queries from one host, and a
sweep must end before the scheduler's timeout. So each ``perfquery`` (``MADS_PER_QUERY`` MADs: the
ClassPortInfo probe and the counter read) waits for its slot (``max_mads_per_second``), and the
sweep stops at ``deadline_s``; the ports it did not reach are reported and read first next sweep
(a round-robin cursor), so every port is read within ceil(ports / ports per sweep) sweeps.

The command runner, clock and sleeper are injected: tests replay recorded outputs and prove both
bounds with a fake clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Link, Sample, now

from .counters import perfquery_samples
from .topology import Fabric, parse_ibnetdiscover, switch_name

Runner = Callable[[Sequence[str]], Awaitable[str]]
MADS_PER_QUERY = 2


@dataclass
class SweepResult:
    samples: list[Sample] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ports_read: int = 0
    ports_left: int = 0  # not reached before the deadline: first in line next sweep
    mads: int = 0


async def run_command(argv: Sequence[str], timeout: float = 30.0) -> str:
    """The production runner: the tool's stdout; a failure or timeout is a CollectionError."""
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)  # fmt: skip
    except OSError as exc:
        raise CollectionError(f"{argv[0]}: {exc.strerror}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError as exc:
        proc.kill()
        raise CollectionError(f"{argv[0]}: no answer in {timeout:.0f}s") from exc
    if proc.returncode:
        raise CollectionError(f"{' '.join(argv)}: exit {proc.returncode}: {err.decode(errors='replace')[:200]}")
    return out.decode(errors="replace")


class FabricSweep:
    def __init__(
        self,
        runner: Runner = run_command,
        *,
        ca: str | None = None,
        ca_port: int | None = None,
        max_mads_per_second: float = 200.0,
        deadline_s: float = 20.0,
        topology_every: int = 30,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.runner, self.clock, self.sleep = runner, clock, sleep
        self.hca_args = [*(["-C", ca] if ca else []), *(["-P", str(ca_port)] if ca_port else [])]
        self.max_mads_per_second, self.deadline_s, self.topology_every = max_mads_per_second, deadline_s, topology_every
        self.fabric: Fabric | None = None
        self._sweeps = 0
        self._cursor = 0  # index into the fabric's switch ports where the next counter pass starts

    async def _run(self, argv: list[str], until: float) -> str:
        """One command, given no more than the time left to the sweep's deadline."""
        try:
            return await asyncio.wait_for(self.runner(argv), max(until - self.clock(), 0.001))
        except TimeoutError as exc:
            raise CollectionError(f"{argv[0]}: no answer before the sweep deadline") from exc

    async def _topology(self, until: float) -> Fabric:
        return parse_ibnetdiscover(await self._run(["ibnetdiscover", *self.hca_args], until))

    async def sweep(self) -> SweepResult:
        out = SweepResult()
        start = self.clock()
        until = start + self.deadline_s
        if self.fabric is None or self._sweeps % self.topology_every == 0:
            self.fabric = await self._topology(until)
            out.problems += self.fabric.problems
        self._sweeps += 1
        fabric = self.fabric
        out.links = fabric.links()
        ports = fabric.switch_ports()
        if self._cursor >= len(ports):
            self._cursor = 0
        order = ports[self._cursor:] + ports[: self._cursor]
        for i, (node, port) in enumerate(order):
            # rate: the n-th query may start no earlier than n * MADS_PER_QUERY / rate after the start
            slot = start + out.mads / self.max_mads_per_second
            if slot + MADS_PER_QUERY / self.max_mads_per_second > until:
                out.ports_left = len(order) - i
                break
            wait = slot - self.clock()
            if wait > 0:
                await self.sleep(wait)
            if self.clock() >= until:
                out.ports_left = len(order) - i
                break
            out.mads += MADS_PER_QUERY
            name = switch_name(node)
            try:
                text = await self._run(["perfquery", *self.hca_args, "-x", str(node.lid), str(port)], until)
                out.samples += perfquery_samples(text, name, now())
                out.ports_read += 1
            except (CollectionError, ParseError) as exc:  # one unreadable port must not end the sweep
                out.problems.append(f"{name}:{port} (lid {node.lid}): {exc}")
            self._cursor = (self._cursor + 1) % len(ports)
        if out.ports_left:
            out.problems.append(f"sweep deadline {self.deadline_s:g}s: {out.ports_left} of {len(ports)} "
                                "switch ports left for the next sweep")  # fmt: skip
        return out
