"""Create and destroy the lab's kernel objects: namespaces, veths, bridges, cgroups, loop volumes.

``up`` records nothing it could not find again: ``down`` discovers everything from the prefix
(namespaces ``<prefix>-*``, processes inside them or inside the lab's cgroups, pids in
``/run/<prefix>/pids``, mounts and loop devices backed by files under ``/run/<prefix>``), so it is
idempotent and works after a crash, a Ctrl-C or a half-finished ``up``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.lab.shell import LabError as LabError  # re-exported: the lab's modules use kernel.LabError, kernel.sh
from tests.lab.shell import sh as sh
from tests.lab.spec import LabSpec
from tests.lab.volumes import lab_loops, make_dataset, make_volume

log = logging.getLogger("fabricscope.lab")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "blkio")


def preflight() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, tc, nft, cgroups, loop devices)")
    for tool in ("ip", "tc", "nft", "snmpd", "lldpd", "lldpcli", "mkfs.ext4", "losetup"):
        if not any((Path(d) / tool).exists() for d in os.environ.get("PATH", "/usr/sbin:/usr/bin").split(":")
                   + ["/usr/sbin", "/sbin"]):
            raise LabError(f"{tool} not found (apt-get install iproute2 nftables snmpd lldpd e2fsprogs mount)")
    for c in CONTROLLERS:
        if not (CGROUP_ROOT / c / "cgroup.procs").exists():
            raise LabError(f"cgroup v1 controller {c} is not mounted at {CGROUP_ROOT / c}")


def up(spec: LabSpec) -> None:
    """Build the fabric. On any failure everything made so far is torn down again."""
    preflight()
    if set(spec.namespaces) & set(list_namespaces(spec.prefix)):
        raise LabError(f"a lab with prefix {spec.prefix!r} is already up (python -m tests.lab down --prefix ...)")
    try:
        _up(spec)
    except BaseException:
        down(spec)
        raise


def _up(spec: LabSpec) -> None:
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    for ns in spec.namespaces:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # no IPv6 chatter (router solicitations, MLD) on lab links: counters show training traffic only
        sh("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1", ns=ns)
    for w in spec.wires:
        sh("ip", "link", "add", "name", w.a_if, "netns", spec.ns(w.a_dev), "type", "veth",
           "peer", "name", w.b_if, "netns", spec.ns(w.b_dev))
    for s in spec.switches:
        ns = spec.ns(s)
        sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        for p in spec.ports(s):
            sh("ip", "-n", ns, "link", "set", p, "master", "br0")
            sh("ip", "-n", ns, "link", "set", p, "up")
        sh("ip", "-n", ns, "link", "set", "br0", "up")
        nft_setup(ns, spec.ports(s))
    for h in spec.hosts:
        ns = spec.ns(h)
        sh("ip", "-n", ns, "addr", "add", f"{spec.ip(h)}/24", "dev", "eth0")
        # GSO stays on: veth then carries up to 64 KB super-packets, so switch counters (drops, CE
        # marks) count those, not wire frames. Turning GSO off (gso_max_segs 1) makes the counts
        # frame-true but costs so much CPU on 2 cores that step times drown in noise (measured).
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        # ECN-capable TCP, so CE marks from a switch make senders back off (RFC 3168)
        sh("sysctl", "-qw", "net.ipv4.tcp_ecn=1", ns=ns)
    for c in CONTROLLERS:
        for h in spec.hosts:
            (CGROUP_ROOT / c / spec.prefix / h).mkdir(parents=True, exist_ok=True)
    for h in spec.hosts:
        make_volume(spec, h)
    make_dataset(spec)
    # the fabric forwards: one ping from every host to host1 fills the bridges' FDBs too
    for h in spec.hosts[1:]:
        sh("ping", "-c", "1", "-W", "2", spec.ip(spec.hosts[0]), ns=spec.ns(h))


def nft_setup(ns: str, ports: list[str]) -> None:
    """An nftables table on the switch with one idle named counter per (kind, port), which fault
    rules use, and a forward chain for those rules. The collector maps counter kinds to metrics."""
    lines = ["add table bridge lab"]
    for p in ports:
        lines += [f"add counter bridge lab ecn_{p}", f"add counter bridge lab fcs_{p}"]
    lines.append("add chain bridge lab ports { type filter hook forward priority 0 ; policy accept ; }")
    r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True)
    if r.returncode:
        raise LabError(f"nft setup in {ns}: {r.stderr.strip()[:300]}")


def cgroup(spec: LabSpec, controller: str, host: str) -> Path:
    return CGROUP_ROOT / controller / spec.prefix / host


def enter_cgroups(spec: LabSpec, host: str) -> None:
    """preexec for a host's processes: join the host's cpu and blkio cgroups."""
    for c in CONTROLLERS:
        (cgroup(spec, c, host) / "cgroup.procs").write_text(str(os.getpid()))


def list_namespaces(prefix: str) -> list[str]:
    out = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix + "-")]


def record_pid(spec: LabSpec, pid: int) -> None:
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    with (spec.run_dir / "pids").open("a") as f:
        f.write(f"{pid}\n")


def lab_pids(spec: LabSpec) -> set[int]:
    """Every process the lab owns: inside its namespaces, its cgroups, or recorded at start."""
    pids: set[int] = set()
    for ns in list_namespaces(spec.prefix):
        pids |= {int(p) for p in sh("ip", "netns", "pids", ns, check=False).split() if p.isdigit()}
    for c in CONTROLLERS:
        base = CGROUP_ROOT / c / spec.prefix
        for f in base.glob("**/cgroup.procs") if base.exists() else []:
            pids |= {int(p) for p in f.read_text().split() if p.isdigit()}
    pidfile = spec.run_dir / "pids"
    if pidfile.exists():
        pids |= {int(p) for p in pidfile.read_text().split() if p.isdigit()}
    pids.discard(os.getpid())
    return {p for p in pids if Path(f"/proc/{p}").exists()}


def _signal(pids: set[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


def _lab_mounts(spec: LabSpec) -> list[str]:
    root = str(spec.run_dir) + "/"
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mnt = line.split()[1]
        if mnt.startswith(root):
            out.append(mnt)
    return sorted(out, key=len, reverse=True)


def down(spec: LabSpec) -> list[str]:
    """Remove everything of this prefix; returns what was left that could not be removed."""
    pids = lab_pids(spec)
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = {p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)}
    _signal(lab_pids(spec), signal.SIGKILL)
    time.sleep(0.2)
    loops = lab_loops(spec)  # before unmounting: a mount's loop is found by its backing file's path
    for mnt in _lab_mounts(spec):
        sh("umount", "-l", mnt, check=False)
    for dev in loops:  # the dataset volume before its disk
        sh("losetup", "-d", dev, check=False)
    deadline = time.monotonic() + 5
    while lab_loops(spec) and time.monotonic() < deadline:
        time.sleep(0.1)  # a detach waits for the last close (the lazy unmount, the volume on its disk)
    for c in CONTROLLERS:
        base = CGROUP_ROOT / c / spec.prefix
        if base.exists():
            for sub in sorted(base.glob("*"), reverse=True):
                if sub.is_dir():
                    _rmdir(sub)
            _rmdir(base)
    for ns in list_namespaces(spec.prefix):
        sh("ip", "netns", "del", ns, check=False)
    if spec.run_dir.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(spec.run_dir)], check=False)
    return leftovers(spec)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def _rmdir(p: Path) -> None:
    for _ in range(20):
        try:
            p.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # processes still leaving the cgroup


def leftovers(spec: LabSpec) -> list[str]:
    """What of this lab still exists (empty after a clean ``down``)."""
    left = [f"netns {n}" for n in list_namespaces(spec.prefix)]
    left += [f"process {p}" for p in lab_pids(spec) if not _zombie(p)]
    left += [f"mount {m}" for m in _lab_mounts(spec)]
    left += [f"cgroup {CGROUP_ROOT / c / spec.prefix}" for c in CONTROLLERS if (CGROUP_ROOT / c / spec.prefix).exists()]
    left += [f"loop {d}" for d in lab_loops(spec)]
    if spec.run_dir.exists():
        left.append(f"dir {spec.run_dir}")
    return left
