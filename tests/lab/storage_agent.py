"""The collector of the lab's storage system: the shared dataset volume's kernel counters.

The storage system is outside the fabric (the root namespace, where its loop devices live). Each
interval this runs the project's storage collector on ``/proc/diskstats`` for the one block device
behind the volume and reports it under the volume's source as the topology declares it
(``--source nas1:share0``): ``read_ops_total``, ``read_bytes_total``, ``read_time_seconds_total``
and the mean ``read_latency_seconds`` per interval, the same for writes. The read latency is the
diskstats read time over reads, so a slow disk under the volume raises it (docs/lab.md).

Run: ``python -m tests.lab.storage_agent --source nas1:share0 --disk loop5 --url http://127.0.0.1:8000
[--interval 1]``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from fabricscope.collectors.host.storage import StorageCollector
from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.core.errors import FabricscopeError

log = logging.getLogger("fabricscope.lab.storage")


def collector(source: str, disk: str, *, proc_root: Path = Path("/proc")) -> StorageCollector:
    """The storage collector reading only ``disk`` and naming it ``source`` (``device:volume``)."""
    device = source.split(":", 1)[0]
    return StorageCollector(device, proc_root=proc_root, disks_include=[disk], disks_exclude=[],
                            disk_sources={disk: source})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, help="the volume's source, <storage device>:<volume>")
    ap.add_argument("--disk", required=True, help="the kernel's name of the volume's block device (loop5)")
    ap.add_argument("--url", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    coll = collector(a.source, a.disk)
    sender = HttpSender(a.url, flush_interval_s=0.5)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("storage agent: %s from /proc/diskstats %s", a.source, a.disk)
    while not stop.wait(a.interval):
        try:
            for s in coll.poll():
                sender.submit("samples", s.to_json())
        except (FabricscopeError, OSError) as exc:
            log.warning("storage %s: poll failed: %s", a.source, exc)
    sender.close(3.0)


if __name__ == "__main__":
    main()
