"""Bench: our SNMP poll of every interface counter of a recorded switch vs net-snmp's snmpbulkwalk
of the same column OIDs, against the same snmpsim agent, in one run.

Prints the wall-time ratio (target ≤ 1.5×) and a capacity figure: devices × 64 ports one collector
process can poll every 10 s, from our poll's CPU time per port (the agent's latency overlaps across
devices in the asyncio scheduler; CPU does not). Needs root (snmpsim runs as an unprivileged user).

    .venv/bin/python bench/snmp_poll.py [--recording cloud/arista-dcs-7150s-52-cl] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.core import now  # noqa: E402
from collectors.switch.inventory import parse_inventory  # noqa: E402
from collectors.switch.snmp import oids  # noqa: E402
from collectors.switch.snmp.fetch import SnmpClient  # noqa: E402
from collectors.switch.snmp.parse import parse  # noqa: E402
from tests.switch import peers  # noqa: E402

DATA = Path(str(importlib.resources.files("snmpsim_data"))) / "data"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recording", default="cloud/arista-dcs-7150s-52-cl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-repetitions", type=int, default=25)
    args = ap.parse_args()
    community = "bench"
    columns = sorted({c.oid for c in oids.columns_for(None)} | {oids.IF_NAME})
    recording = {community: DATA / f"{args.recording}.snmprec.bz2"}
    with tempfile.TemporaryDirectory() as tmp, peers.snmpsim(Path(tmp), recording) as port:
        import os

        os.environ["FS_BENCH_COMMUNITY"] = community
        snmp = {"port": port, "community": {"env": "FS_BENCH_COMMUNITY"}, "max_repetitions": args.max_repetitions}
        spec = {"name": "bench", "address": "127.0.0.1", "protocols": ["snmp"], "interval": 60, "timeout": 30}
        dev = parse_inventory({"devices": [{**spec, "snmp": snmp}]}).devices[0]

        ours_wall, ours_cpu, nports, nsamples, nvb = [], [], 0, 0, 0

        async def poll_rounds() -> None:
            nonlocal nports, nsamples, nvb
            client = SnmpClient(dev)
            await client.walk(columns, [oids.SYS_UPTIME])  # warm-up: engine and transport set-up
            for _ in range(args.rounds):
                w0, c0 = time.perf_counter(), time.process_time()
                vbs = await client.walk(columns, [oids.SYS_UPTIME])
                p = parse("bench", vbs, now(), oids.columns_for(None))
                ours_wall.append(time.perf_counter() - w0)
                ours_cpu.append(time.process_time() - c0)
                nports, nsamples, nvb = len({s.source for s in p.samples}), len(p.samples), len(vbs)
            client.close()

        asyncio.run(poll_rounds())

        net_wall, net_vb = [], 0
        for _ in range(args.rounds):
            w0 = time.perf_counter()
            lines = 0
            for col in columns:
                out = subprocess.run(["snmpbulkwalk", "-M", "/dev/null", "-v2c", "-c", community, "-On",
                                      f"-Cr{args.max_repetitions}", f"127.0.0.1:{port}", col],
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
                lines += sum(1 for ln in out.splitlines() if ln.startswith("."))
            net_wall.append(time.perf_counter() - w0)
            net_vb = lines

    ours, net = statistics.median(ours_wall), statistics.median(net_wall)
    cpu_per_port = statistics.median(ours_cpu) / max(1, nports)
    ports_per_10s = 10.0 / cpu_per_port
    print(f"recording            {args.recording}: {nports} interfaces, {len(columns)} columns")
    print(f"ours                 {ours * 1e3:8.1f} ms wall  {statistics.median(ours_cpu) * 1e3:7.1f} ms CPU  "
          f"{nvb} varbinds -> {nsamples} samples")  # fmt: skip
    print(f"snmpbulkwalk x{len(columns):<3}     {net * 1e3:8.1f} ms wall  {net_vb} varbinds")
    print(f"ratio ours/net-snmp  {ours / net:8.2f}x  (target <= 1.5x)")
    print(f"capacity             {ports_per_10s:,.0f} ports per 10 s per process on CPU "
          f"= {ports_per_10s / 64:,.0f} devices x 64 ports (target >= 200)")  # fmt: skip


if __name__ == "__main__":
    main()
