"""Host pressure: PSI stall time (``/proc/pressure/{cpu,io,irq,memory}``, and the same files of the
training job's cgroup v2 directories) and CPU thermal throttle counts.

A rank whose CPU time is stolen (data-loader workers over the cgroup's quota, a noisy neighbour),
whose memory is reclaimed or whose I/O stalls is a host-layer straggler; PSI measures exactly that
time. ``total=`` is cumulative microseconds, so it becomes ``<resource>_pressure_seconds_total``
(``level`` some|full); the averages (``avg10`` ...) are the kernel's own smoothing of it and are not
kept (rates come from the counter). Thermal throttle counts are summed per host: core counts over
CPUs, package counts once per package (every CPU of a package shows the same package counter).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.common import read_int, read_text
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import ParseError
from fabricscope.core.model import Sample, now

log = logging.getLogger(__name__)

# irq (Linux 6.1+, IRQ time accounting) prints only a "full" line; the tuple is in `ls` order, as a glob pastes them.
RESOURCES = ("cpu", "io", "irq", "memory")
LEVELS = ("some", "full")
PSI_METRIC = {r: f"{r}_pressure_seconds_total" for r in RESOURCES}
THROTTLE_METRIC = "cpu_thermal_throttle_total"


def parse_psi(text: str) -> dict[str, float]:
    """One PSI file (``some avg10=.. avg60=.. avg300=.. total=US`` / ``full ...``) -> {level: seconds}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        level, *fields = line.split() or [""]  # the kernel separates by spaces; a paste may carry tabs
        if level not in LEVELS:
            continue
        for item in fields:
            if item.startswith("total="):
                try:
                    out[level] = int(item[6:]) / 1e6
                except ValueError as exc:
                    raise ParseError(f"PSI {level}: total is not an integer: {item!r}") from exc
    if not out:
        raise ParseError("no 'some|full ... total=' PSI lines")
    return out


def psi_samples(resource: str, levels: dict[str, float], ts: float, source: str,
                cgroup: str | None = None) -> list[Sample]:
    metric = PSI_METRIC[resource]
    return [Sample(ts, source, metric, v, {"level": lv, "cgroup": cgroup} if cgroup else {"level": lv})
            for lv, v in levels.items()]


class ThermalThrottle:
    """Host sums of ``cpu*/thermal_throttle/{core,package}_throttle_count``. The CPU list and which
    CPU speaks for each package are static, so they are resolved once (and again only if a read fails:
    CPU hot-unplug); each poll then reads one file per CPU plus one per package."""

    def __init__(self, sys_root: Path) -> None:
        self.base = sys_root / "devices/system/cpu"
        self._files: tuple[list[Path], list[Path]] | None = None

    def _resolve(self) -> tuple[list[Path], list[Path]]:
        core: list[Path] = []
        package: list[Path] = []
        seen: set[int | None] = set()
        cpus = sorted(d for d in _listdir(self.base) if d.startswith("cpu") and d[3:].isdigit())
        for cpu in cpus:
            tt = self.base / cpu / "thermal_throttle"
            if os.path.exists(tt / "core_throttle_count"):
                core.append(tt / "core_throttle_count")
            pkg = read_int(self.base / cpu / "topology/physical_package_id")
            if os.path.exists(tt / "package_throttle_count") and pkg not in seen:
                package.append(tt / "package_throttle_count")
                seen.add(pkg)  # no topology (None): one package counter, never one per CPU
        return core, package

    def read(self) -> dict[str, float]:
        if self._files is None:
            self._files = self._resolve()
        out: dict[str, float] = {}
        for scope, files in zip(("core", "package"), self._files, strict=True):
            if not files:
                continue  # absent where the kernel has no thermal_throttle (VMs, non-x86): no sample
            values = [read_int(f) for f in files]
            if any(v is None for v in values):
                self._files = None  # a CPU went away: resolve again next time, skip this one
                return {}
            out[scope] = float(sum(v for v in values if v is not None))
        return out


class PressureCollector:
    """PSI of the host and of the named cgroups (globs under the cgroup v2 root), thermal throttling."""

    name = "pressure"

    def __init__(self, host: str, *, proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup"),
                 cgroups: Sequence[str] = (), thermal_root: Path | None = Path("/sys"),
                 thermal_every: int = 1) -> None:
        self.host, self.proc_root, self.cgroup_root, self.cgroups = host, proc_root, cgroup_root, cgroups
        self.thermal = ThermalThrottle(thermal_root) if thermal_root is not None else None
        # Throttle counts move rarely and cost a read per CPU: not on every poll.
        self.thermal_every, self._polls = max(1, thermal_every), 0

    def _psi(self, base: Path, ts: float, cgroup: str | None) -> list[Sample]:
        out: list[Sample] = []
        for resource in RESOURCES:
            text = read_text(base / f"{resource}.pressure" if cgroup else base / resource)
            if text is None:
                continue  # no PSI (psi=0, kernel < 4.20, cgroup gone): absent
            try:
                out += psi_samples(resource, parse_psi(text), ts, self.host, cgroup)
            except ParseError as exc:
                report_problems(self.host, "proc-pressure", [f"{cgroup or 'host'} {resource}: {exc}; skipped"], log)
        return out

    def job_cgroups(self) -> list[str]:
        """The cgroup directories the globs match now (jobs start and end: matched on every poll)."""
        found: set[str] = set()
        root = str(self.cgroup_root)
        for pattern in self.cgroups:
            for path in glob.glob(os.path.join(root, pattern.lstrip("/"))):
                if os.path.isdir(path):
                    found.add(os.path.relpath(path, root))
        return sorted(found)

    def poll(self) -> list[Sample]:
        ts = now()
        out = self._psi(self.proc_root / "pressure", ts, None)
        for cg in self.job_cgroups():
            out += self._psi(self.cgroup_root / cg, ts, cg)
        if self.thermal is not None and self._polls % self.thermal_every == 0:
            out += [Sample(ts, self.host, THROTTLE_METRIC, v, {"scope": scope})
                    for scope, v in self.thermal.read().items()]
        self._polls += 1
        return out


def cgroup2_root(proc_root: Path, sys_root: Path) -> Path:
    """Where cgroup v2 is mounted: ``/sys/fs/cgroup`` on unified hosts, ``/sys/fs/cgroup/unified`` on
    hybrid ones (systemd's v1+v2 layout); under ``sys_root`` when the host's /sys is mounted elsewhere."""
    for line in (read_text(proc_root / "mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2" and parts[1].startswith("/sys/"):
            return sys_root / parts[1].removeprefix("/sys/")
    return sys_root / "fs/cgroup"


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


# -- `fabricscope parse` format: one PSI file, or several in one paste (`cat /proc/pressure/{cpu,io,memory}`,
#    as recorded on the H200 machine; a shell session, `head`/`grep` output, an Android ANR report or logcat
#    that prints each file under a line naming it). PSI text itself does not name its resource: it comes
#    from --resource; else from a line of the paste that names the file (`/proc/pressure/io`, `io.pressure`,
#    `cat io`, `==> .../memory <==`) or, with `grep`, the PSI line's own prefix; else from the content where
#    only cpu can be meant (no "full" line: cpu before Linux 5.13); else, as a guess said in `guesses`, from
#    a file name that is exactly a resource (cpu, io.pressure, ...) or, for three unnamed files, the order
#    cpu, io, memory. A PSI line may carry a prefix (logcat's time/pid/tag, grep's file name): the record is
#    found by its own shape. A cgroup's <resource>.pressure file is labelled with --cgroup, or with its
#    directory's name (a guess).
_NAMES = {f"{r}{suffix}": r for r in RESOURCES for suffix in ("", ".pressure", ".txt", ".pressure.txt")}
_PSI_LINE = re.compile(r"(?<![\w.])(some|full)\s+avg10=\S+\s+avg60=\S+\s+avg300=\S+\s+total=(\S+)")
_NAMED = re.compile(r"(?:/pressure/|\bcat\s+)(cpu|io|irq|memory)\b|\b(cpu|io|irq|memory)\.pressure\b")
# What a paste of unnamed PSI files most likely is, by how many there are: `cat /proc/pressure/{cpu,io,memory}`
# or `cat /proc/pressure/*` (irq between io and memory, and only where its group has no "some" line).
_CAT_ORDERS = {3: ("cpu", "io", "memory"), 4: ("cpu", "io", "irq", "memory")}


@dataclass
class _Group:
    """One PSI file found in a paste: its lines, and the resource a line of the paste named for it."""

    named: str | None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _named(line: str) -> str | None:
    found = {a or b for a, b in _NAMED.findall(line)}
    return found.pop() if len(found) == 1 else None


def _groups(text: str) -> tuple[list[_Group], list[str]]:
    """The PSI files in ``text`` (each starts at a ``some`` line, or at a line naming a resource) and the
    lines that are neither PSI nor a resource's name."""
    groups: list[_Group] = []
    other: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _PSI_LINE.search(line)
        if m is None:
            name = _named(line)
            if name is None:
                other.append(line[:80])
            elif not (groups and groups[-1].named == name and pending is None):  # not the close of the open one
                pending = name
            continue
        level = m[1]
        name = _named(line[: m.start()]) or pending  # grep's "/proc/pressure/io:some ..." names its own line
        # a file has one line per level: a second "full" is the next file's (irq's, which has no "some")
        again = bool(groups) and any(ln.startswith(level) for ln in groups[-1].lines)
        if level == "some" or not groups or again or (name is not None and name != groups[-1].named):
            groups.append(_Group(name))
            pending = None
        groups[-1].lines.append(line[m.start():])
    return groups, other


def _resource(path: Path, group: str, given: str | None, guesses: list[str]) -> str:
    if given is not None:
        if given not in RESOURCES:
            raise ParseError(f"--resource {given!r}: expected one of {', '.join(RESOURCES)}")
        return given
    lines = group.splitlines()
    if not any(line.startswith("full ") for line in lines):
        return "cpu"  # only cpu pressure has no "full" line (kernels before 5.13): the content says so
    if not any(line.startswith("some ") for line in lines):
        return "irq"  # only irq pressure has no "some" line (Linux 6.1+): the content says so
    named = _NAMES.get(path.name)
    if named is None:
        raise ParseError(f"PSI text does not name its resource and the file name {path.name!r} does not either: "
                         f"name it with --resource ({', '.join(RESOURCES)})")
    guesses.append(f"resource {named} taken from the file name {path.name!r}; confirm with --resource {named}")
    return named


def _named_groups(groups: list[_Group], device: str, ts: float, cgroup: str | None,
                  problems: list[str]) -> list[Sample]:
    """A paste whose lines name each file's resource: read as named; a resource named twice keeps its
    first reading, an unnamed file is cpu only when it has no "full" line; the rest is said."""
    samples: list[Sample] = []
    seen: set[str] = set()
    for g in groups:
        res = g.named
        if res is None and not any(line.startswith("full ") for line in g.lines):
            res = "cpu"
        elif res is None and not any(line.startswith("some ") for line in g.lines):
            res = "irq"
        if res is None:
            problems.append(f"PSI lines with no resource named, skipped: {g.lines[0][:80]!r}")
        elif res in seen:
            problems.append(f"{res} pressure printed again, later reading skipped: {g.lines[0][:80]!r}")
        else:
            seen.add(res)
            samples += psi_samples(res, parse_psi(g.text), ts, device, cgroup)
    return samples


def _read_psi(path: Path, device: str, ts: float, resource: str | None = None,
              cgroup: str | None = None) -> Reading:
    groups, other = _groups(path.read_text())
    problems = [f"line not a PSI 'some|full ... total=' line, skipped: {line!r}" for line in other]
    guesses: list[str] = []
    if not groups:
        raise ParseError("no 'some ... total=' PSI line")
    if cgroup is None and path.name.endswith((".pressure", ".pressure.txt")) and path.parent.name:
        cgroup = path.parent.name
        guesses.append(f"a cgroup's PSI file: cgroup {cgroup!r} taken from its directory; confirm with --cgroup")
    if resource is None and any(g.named for g in groups):
        samples = _named_groups(groups, device, ts, cgroup, problems)
        return Reading(samples=samples, problems=problems, guesses=guesses)
    order = _CAT_ORDERS.get(len(groups))
    if order and resource is None and _fits(order, groups):
        count = ("three", "four")[len(groups) - 3]
        cat = "*" if "irq" in order else "{cpu,io,memory}"
        guesses.append(f"{count} PSI files in one: read as {', '.join(order)} in that order "
                       f"(cat /proc/pressure/{cat}); split them to confirm")
        samples = [s for r, g in zip(order, groups, strict=True)
                   for s in psi_samples(r, parse_psi(g.text), ts, device, cgroup)]
        return Reading(samples=samples, problems=problems, guesses=guesses)
    if len(groups) != 1:
        raise ParseError(f"{len(groups)} PSI files in one input; expected 1, or cpu, io and memory (and irq "
                         f"between io and memory) in that order")
    res = _resource(path, groups[0].text, resource, guesses)
    return Reading(samples=psi_samples(res, parse_psi(groups[0].text), ts, device, cgroup), problems=problems,
                   guesses=guesses)


def _fits(order: tuple[str, ...], groups: list[_Group]) -> bool:
    """The content agrees with the order: irq's group (and only it) has no "some" line."""
    return all((r == "irq") == (not any(ln.startswith("some ") for ln in g.lines))
               for r, g in zip(order, groups, strict=True))


def _looks_like_psi(_path: Path, head: str) -> bool:
    """PSI lines only (a file), or PSI records inside other text (a paste, a log) under a line naming them."""
    lines = [line for line in head.splitlines() if line.strip()]
    if 1 <= len(lines) <= 6 and all(line.split(None, 1)[0] in LEVELS and "total=" in line for line in lines):
        return True
    return any(_PSI_LINE.search(line) for line in lines) and any(_named(line) for line in lines)


FORMATS = (
    Format("proc-pressure", "/proc/pressure/{cpu,io,irq,memory} or a cgroup's <resource>.pressure (PSI stall "
           "time, counters); the resource from --resource or the content, the cgroup from --cgroup",
           sniff=_looks_like_psi, read=_read_psi, options=("resource", "cgroup")),
)
