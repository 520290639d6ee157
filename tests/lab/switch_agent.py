"""A collector process for one Linux switch, run on the switch (here: inside its namespace).

Each interval it polls the local ``snmpd`` with the project's SNMP collector (IF-MIB counters, and
LLDP-MIB neighbours that ``lldpd`` serves through AgentX) and the Linux-switch collector (qdiscs,
nftables counters, carrier losses), and sends samples to the ingest API and discovered links to
``/v1/topology/links``.

Run: ``python -m tests.lab.switch_agent --switch leaf1 --url http://127.0.0.1:18080
--snmp-port 1161 [--ports 'swp*'] [--interval 1] [--wire-frame-bytes 1514]`` with the community in
``FSLAB_SNMP_COMMUNITY``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.switch.cli import LinkPublisher
from fabricscope.collectors.switch.inventory import Device
from fabricscope.collectors.switch.snmp.collector import SnmpCollector
from fabricscope.core.errors import FabricscopeError
from tests.lab.linux_switch import LinuxSwitchCollector

log = logging.getLogger("fabricscope.lab.switch")


async def run(a: argparse.Namespace) -> None:
    dev = Device.model_validate({
        "name": a.switch, "address": "127.0.0.1", "protocols": ["snmp"], "interval": a.interval,
        "timeout": a.interval * 0.8, "include": [a.ports], "lldp": True,
        "snmp": {"port": a.snmp_port, "version": "2c", "community": {"env": "FSLAB_SNMP_COMMUNITY"}}})
    snmp = SnmpCollector(dev)
    linux = LinuxSwitchCollector(a.switch, ports=(a.ports,), wire_frame_bytes=a.wire_frame_bytes)
    sender = HttpSender(a.url, flush_interval_s=0.5)
    links = LinkPublisher(a.url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    published: set[tuple[str, str]] = set()
    nxt = loop.time()
    while not stop.is_set():
        samples = []
        try:
            res = await snmp.poll()
            samples += res.samples
            for p in res.problems:
                log.warning("%s: %s", a.switch, p)
            new = [link for link in res.links if (link.a, link.b) not in published]
            if new:
                await asyncio.to_thread(links, new)
                published |= {(link.a, link.b) for link in new}
                log.info("%s: LLDP links %s", a.switch, [(link.a, link.b) for link in new])
        except (FabricscopeError, RuntimeError, OSError) as exc:
            log.warning("%s: SNMP poll failed: %s", a.switch, exc)
        try:
            samples += await asyncio.to_thread(linux.poll)
        except FabricscopeError as exc:
            log.warning("%s: linux poll failed: %s", a.switch, exc)
        for s in samples:
            sender.submit("samples", s.to_json())
        nxt += a.interval
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, nxt - loop.time()))
    sender.close(3.0)
    links.close()
    await snmp.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--snmp-port", type=int, default=161)
    ap.add_argument("--ports", default="swp*")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--wire-frame-bytes", type=int, default=None,
                    help="count nftables packets as wire frames of this size (fabrics carrying GSO super-packets)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(a))


if __name__ == "__main__":
    main()
