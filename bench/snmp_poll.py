"""Bench: our SNMP poll of every interface counter of a recorded switch vs net-snmp's snmpbulkwalk
of the same column OIDs, against the same snmpsim agent, in one run; then many devices at once.

Single device (the snmpsim replay of a real switch walk), each mode ``--rounds`` times after a
warm-up poll, every mode a full :class:`SnmpCollector` poll (fetch, parse, reset marking, LLDP):

* ``pysnmp``        the reference engine (pysnmp/pyasn1), every column every poll (the old path)
* ``fast full``     the v2c fast path (own BER codec on an asyncio UDP socket), every column
* ``fast planned``  the fast path with the per-device walk plan (no 32-bit fallbacks the device
                    covers with HC columns, no columns it never answers); a full walk every
                    ``REPROBE_EVERY`` polls is included in the amortised CPU figure

Samples of every mode are checked equal to the pysnmp reference. Capacity = 10 s / CPU per device
poll of the recorded switch, scaled to 64 ports; agent latency overlaps across devices in one event
loop, CPU does not.

Many devices: snmpsim is one Python process that needs ~0.2 s of CPU per poll of that switch, so it
cannot serve hundreds of devices on these cores. The multi-device runs therefore poll a real net-snmp
``snmpd`` in a private network namespace with 64 real (veth) ports, through the production
``SwitchScheduler.poll`` path (self-metrics, ``to_json`` of every sample into a counting sink):

* ``paced``     ``--devices`` devices (default 200), each polled once per 10 s interval, starts
                spread evenly over the interval, for ``--intervals`` intervals: are all polls done,
                and on time (before the device's next slot)? What share of one core did we use?
* ``saturated`` ``--burst`` devices polled back to back for 10 s: device polls per 10 s one process
                completes when nothing waits (bounded by the one snmpd serving them all).

Needs root (snmpsim runs as an unprivileged user; the netns).

    .venv/bin/python bench/snmp_poll.py [--recording cloud/arista-dcs-7150s-52-cl] [--rounds 3]
    .venv/bin/python bench/snmp_poll.py --recording network/router/juniper-mx960-16-1r6-7-b --vendor juniper \
        --no-multi   # with JUNIPER-COS-MIB queue tables (8 queues x 65 ports)
    .venv/bin/python bench/snmp_poll.py --recording network/switch/cisco-c3750 --vendor cisco \
        --no-multi   # with CISCO-PORT-QOS-MIB egress queues (4 queues x 3 thresholds) and CISCO-PFC-EXT-MIB
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.resources
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricscope.collectors.switch.inventory import parse_inventory  # noqa: E402
from fabricscope.collectors.switch.scheduler import SwitchScheduler  # noqa: E402
from fabricscope.collectors.switch.snmp.collector import SnmpCollector  # noqa: E402
from fabricscope.collectors.switch.snmp.plan import REPROBE_EVERY  # noqa: E402
from tests.switch import peers  # noqa: E402

DATA = Path(str(importlib.resources.files("snmpsim_data"))) / "data"
MODES = {"pysnmp": ("pysnmp", False), "fast full": ("auto", False), "fast planned": ("auto", True)}


def device(name: str, port: int, community_env: str, reps: int, vendor: str | None = None):
    snmp = {"port": port, "community": {"env": community_env}, "max_repetitions": reps}
    spec = {"name": name, "address": "127.0.0.1", "protocols": ["snmp"], "interval": 60, "timeout": 30,
            "vendor": vendor}
    return parse_inventory({"devices": [{**spec, "snmp": snmp}]}).devices[0]


def counted(col: SnmpCollector) -> list[int]:
    """Wrap the collector's walk to count varbinds per poll."""
    seen: list[int] = []
    walk = col.client.walk

    async def counting(*a, **kw):
        out = await walk(*a, **kw)
        seen.append(len(out))
        return out

    col.client.walk = counting  # type: ignore[method-assign]
    return seen


def key(samples) -> set:
    return {(s.source, s.metric, tuple(sorted((s.labels or {}).items())), s.value) for s in samples}


def single(dev, rounds: int) -> tuple[dict, list[str]]:
    res: dict[str, dict] = {}
    columns: list[str] = []

    async def run() -> None:
        for mode, (engine, prune) in MODES.items():
            col = SnmpCollector(dev, engine, prune)  # type: ignore[arg-type]
            columns[:] = col.plan.all
            nvb = counted(col)
            first = await col.poll()  # warm-up: transport set-up and, when planned, the full walk
            wall, cpu = [], []
            for _ in range(rounds):
                w0, c0 = time.perf_counter(), time.process_time()
                r = await col.poll()
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            await col.aclose()
            res[mode] = {"wall": statistics.median(wall), "cpu": statistics.median(cpu), "vb": nvb[-1],
                         "samples": key(r.samples), "first": key(first.samples),
                         "ports": len({s.source for s in r.samples}),
                         "links": sorted(str(link.to_json()) for link in r.links),
                         "walked": len(col.plan.next_walk()[0])}  # fmt: skip

    asyncio.run(run())
    return res, columns


@contextlib.contextmanager
def snmpd_switch(ports: int = 64) -> Iterator[str]:
    """net-snmp snmpd in a private netns with ``ports`` veth interfaces; yields its address."""
    tag = os.getpid() % 100000
    ns, up_a, up_b = f"fsbench{tag}", f"fsbU{tag}", f"fsbV{tag}"
    workdir = Path(tempfile.mkdtemp(prefix="fs-bench-snmpd-"))
    proc = None

    def ip(*a: str) -> None:
        subprocess.run(["ip", *a], check=True, capture_output=True)

    try:
        ip("netns", "add", ns)
        ip("link", "add", up_a, "type", "veth", "peer", "name", up_b)
        ip("link", "set", up_b, "netns", ns)
        ip("addr", "add", "10.213.12.1/30", "dev", up_a)
        ip("link", "set", up_a, "up")
        ip("-n", ns, "addr", "add", "10.213.12.2/30", "dev", up_b)
        ip("-n", ns, "link", "set", up_b, "up")
        for i in range(1, ports, 2):  # veth pairs inside the namespace: two switch ports each
            ip("-n", ns, "link", "add", f"Ethernet{i}", "type", "veth", "peer", "name", f"Ethernet{i + 1}")
            ip("-n", ns, "link", "set", f"Ethernet{i}", "up")
            ip("-n", ns, "link", "set", f"Ethernet{i + 1}", "up")
        (workdir / "snmpd.conf").write_text("agentAddress udp:10.213.12.2:161\nrocommunity fsbench 10.213.12.0/30\n")
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(workdir / "persist"), "MIBS": "", "MIBDIRS": "/dev/null"}
        proc = subprocess.Popen(["ip", "netns", "exec", ns, "snmpd", "-f", "-Lf", str(workdir / "snmpd.log"),
                                 "-C", "-c", str(workdir / "snmpd.conf"), "-p", str(workdir / "snmpd.pid")],
                                env=env)  # fmt: skip
        deadline = time.monotonic() + 15
        while True:  # until the agent lists every port (it caches the interface table briefly)
            r = subprocess.run(["snmpbulkwalk", "-M", "/dev/null", "-v2c", "-c", "fsbench", "-t", "0.5", "-On",
                                "10.213.12.2", "1.3.6.1.2.1.31.1.1.1.1"], capture_output=True, text=True)  # fmt: skip
            if r.stdout.count("Ethernet") >= ports or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        yield "10.213.12.2"
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        subprocess.run(["ip", "link", "del", up_a], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["rm", "-rf", str(workdir)], capture_output=True)


class CountingSink:
    def __init__(self) -> None:
        self.items = 0

    def submit(self, kind: str, item: dict, job: str | None = None) -> bool:
        self.items += 1
        return True

    def flush(self) -> bool:
        return True

    def close(self) -> None:
        pass


def snmpd_devices(address: str, n: int, interval: float) -> list:
    os.environ["FS_BENCH_SNMPD"] = "fsbench"
    spec = {"address": address, "protocols": ["snmp"], "interval": interval, "timeout": interval * 0.8,
            "snmp": {"community": {"env": "FS_BENCH_SNMPD"}}}  # fmt: skip
    return parse_inventory({"devices": [{"name": f"sw{i:03d}", **spec} for i in range(n)]}).devices


async def warm_up(sched: SwitchScheduler, at_once: int = 20) -> None:
    """First polls (full walks: the plans are learnt), a few devices at a time as a scheduler's
    jitter would spread them, not 200 full walks in one burst at one agent."""
    gate = asyncio.Semaphore(at_once)

    async def one(t) -> None:
        async with gate:
            if not await sched.poll(t):
                raise RuntimeError(f"{t.device.name}: warm-up poll failed")

    await asyncio.gather(*(one(t) for t in sched.targets))


def paced(address: str, n: int, interval: float, intervals: int) -> dict:
    """n devices, each polled once per interval at its own offset, through SwitchScheduler.poll."""
    sink = CountingSink()
    sched = SwitchScheduler(snmpd_devices(address, n, interval), sink)

    async def run() -> dict:
        await warm_up(sched)
        ports = len({s.source for s in (await sched.targets[0].collector.poll()).samples})
        durations: list[float] = []
        ok = late = 0
        t0, c0 = time.monotonic(), time.process_time()

        async def device(i: int, t) -> None:
            nonlocal ok, late
            for k in range(intervals):
                slot = t0 + k * interval + i * interval / n
                await asyncio.sleep(max(0.0, slot - time.monotonic()))
                start = time.monotonic()
                polled = await sched.poll(t)  # (not `ok += await`: that reads ok before awaiting)
                ok += polled
                durations.append(time.monotonic() - start)
                late += time.monotonic() > slot + interval

        await asyncio.gather(*(device(i, t) for i, t in enumerate(sched.targets)))
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        for t in sched.targets:
            await t.collector.aclose()
        durations.sort()
        return {"ok": ok, "late": late, "wall": wall, "cpu": cpu, "ports": ports, "items": sink.items,
                "p50": durations[len(durations) // 2], "max": durations[-1]}  # fmt: skip

    return asyncio.run(run())


def saturated(address: str, n: int, seconds: float) -> dict:
    sched = SwitchScheduler(snmpd_devices(address, n, 60), CountingSink())

    async def run() -> dict:
        await warm_up(sched)
        done = failed = 0
        t0, c0 = time.monotonic(), time.process_time()

        async def loop(t) -> None:
            nonlocal done
            nonlocal failed
            while time.monotonic() < t0 + seconds:
                if await sched.poll(t):
                    done += 1
                else:  # failed or backing off: count it, do not spin
                    failed += 1
                    await asyncio.sleep(0.5)

        await asyncio.gather(*(loop(t) for t in sched.targets))
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        for t in sched.targets:
            await t.collector.aclose()
        return {"polls": done, "failed": failed, "wall": wall, "cpu": cpu}

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recording", default="cloud/arista-dcs-7150s-52-cl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-repetitions", type=int, default=25)
    ap.add_argument("--devices", type=int, default=200, help="devices in the paced multi-device run")
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--intervals", type=int, default=2)
    ap.add_argument("--burst", type=int, default=20, help="devices polled back to back in the saturated run")
    ap.add_argument("--no-multi", action="store_true", help="only the single-device comparison")
    ap.add_argument("--vendor", default=None, help="inventory vendor hint: its queue/PFC tables are walked too "
                    "(e.g. --recording network/router/juniper-mx960-16-1r6-7-b --vendor juniper)")
    args = ap.parse_args()
    src = DATA / f"{args.recording}.snmprec.bz2"
    with tempfile.TemporaryDirectory() as tmp, peers.snmpsim(Path(tmp), {"dev0": src}) as port:
        os.environ["FS_BENCH_COMMUNITY"] = "dev0"
        res, columns = single(device("dev0", port, "FS_BENCH_COMMUNITY", args.max_repetitions, args.vendor),
                              args.rounds)

        net_wall, net_vb = [], 0
        for _ in range(args.rounds):
            w0 = time.perf_counter()
            lines = 0
            for col in columns:
                out = subprocess.run(["snmpbulkwalk", "-M", "/dev/null", "-v2c", "-c", "dev0", "-On",
                                      f"-Cr{args.max_repetitions}", f"127.0.0.1:{port}", col],
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
                lines += sum(1 for ln in out.splitlines() if ln.startswith("."))
            net_wall.append(time.perf_counter() - w0)
            net_vb = lines
        net = statistics.median(net_wall)
    pace = sat = None
    if not args.no_multi:
        with snmpd_switch() as address:
            pace = paced(address, args.devices, args.interval, args.intervals)
            sat = saturated(address, args.burst, 10.0)

    ref = res["pysnmp"]
    nports = ref["ports"]
    print(f"recording            {args.recording}: {nports} interfaces with samples, {len(columns)} columns")
    for mode, r in res.items():
        same = r["samples"] == ref["samples"] and r["first"] == ref["first"] and r["links"] == ref["links"]
        print(f"ours {mode:<15} {r['wall'] * 1e3:8.1f} ms wall  {r['cpu'] * 1e3:7.1f} ms CPU  {r['vb']:5d} varbinds "
              f"({r['walked']} columns) -> {len(r['samples'])} samples, {len(r['links'])} links; "
              f"{'same as pysnmp' if same else 'DIFFERENT from pysnmp'}")  # fmt: skip
    print(f"snmpbulkwalk x{len(columns):<3}     {net * 1e3:8.1f} ms wall                  {net_vb:5d} varbinds")
    fast, full = res["fast planned"], res["fast full"]
    print(f"ratio ours/net-snmp  {fast['wall'] / net:8.2f}x planned, {full['wall'] / net:.2f}x full walk, "
          f"{ref['wall'] / net:.2f}x pysnmp  (target <= 1.5x)")  # fmt: skip
    amortised = (fast["cpu"] * (REPROBE_EVERY - 1) + full["cpu"]) / REPROBE_EVERY
    print(f"CPU per device poll  {amortised * 1e3:8.2f} ms fast (planned, a full walk every {REPROBE_EVERY} polls "
          f"amortised), {ref['cpu'] * 1e3:.1f} ms pysnmp: {ref['cpu'] / amortised:.1f}x less")  # fmt: skip
    per64 = amortised * 64 / nports
    print(f"capacity             {10 / per64:8.0f} devices x 64 ports per 10 s per process on CPU "
          f"(pysnmp: {10 / (ref['cpu'] * 64 / nports):.0f}; target >= 200)")  # fmt: skip
    if pace and sat:
        n, polls = args.devices, args.devices * args.intervals
        per_poll = pace["cpu"] / polls
        print(f"paced (snmpd)        {n} devices x {pace['ports']} ports, 1 poll each per {args.interval:.0f} s, "
              f"{args.intervals} intervals: {pace['ok']}/{polls} polls ok, {pace['late']} late; poll p50 "
              f"{pace['p50'] * 1e3:.0f} ms, max {pace['max'] * 1e3:.0f} ms; our CPU {pace['cpu'] / pace['wall']:.0%} "
              f"of one core, {per_poll * 1e3:.2f} ms per poll ({pace['items']} sink items)")  # fmt: skip
        rate = sat["polls"] * 10 / sat["wall"]
        print(f"saturated (snmpd)    {args.burst} devices back to back: {rate:.0f} device polls per 10 s "
              f"({sat['failed']} failed), our CPU "
              f"{sat['cpu'] / sat['wall']:.0%} of one core, {sat['cpu'] / max(1, sat['polls']) * 1e3:.2f} ms per poll "
              "(the one snmpd serving them all is the limit)")  # fmt: skip


if __name__ == "__main__":
    main()
