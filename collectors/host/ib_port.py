"""An InfiniBand/RDMA port's state and line rate from sysfs (``ports/<n>/state``, ``ports/<n>/rate``), as the
same gauges sysfs-net gives an interface (``oper_up``, ``speed_bps``), and what a device directory holds that
is not read (mlx4's ``diag_counters/``): said, never dropped in silence (issue #43).

``state`` is ``"<code>: <NAME>"`` (drivers/infiniband/core/sysfs.c ``state_show``: 1 DOWN, 2 INIT, 3 ARMED,
4 ACTIVE, 5 ACTIVE_DEFER); ``rate`` is ``"<Gb/s> Gb/sec (<width>X <speed>)"`` (``rate_show``), the nominal
signalling rate, as ibnetdiscover's width x speed gives it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fabricscope.collectors.host.common import read_text
from fabricscope.core.model import Sample

# ACTIVE_DEFER: the port is active and passes traffic, its move to ACTIVE only deferred (IBTA vol 1, 7.2.x).
_UP_STATES = frozenset({4, 5})
_STATE = re.compile(r"\s*(\d+)\s*:\s*\w+")
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")


def port_state(port_dir: Path, ts: float, source: str, where: str) -> tuple[list[Sample], list[str]]:
    """``oper_up`` from ``state`` and, while the port is up, ``speed_bps`` from ``rate`` (a down port's rate is
    what it last trained to or the hardware's default, not a line rate). A file that does not read as its
    kernel format is a problem line."""
    out: list[Sample] = []
    problems: list[str] = []
    state, rate = read_text(port_dir / "state"), read_text(port_dir / "rate")
    up: bool | None = None
    if state is not None:
        m = _STATE.match(state)
        if m is None:
            problems.append(f"{where}: state {state.strip()!r} not understood: oper_up not read")
        else:
            up = int(m.group(1)) in _UP_STATES
            out.append(Sample(ts, source, "oper_up", 1.0 if up else 0.0))
    if rate is not None:
        m = _RATE.match(rate)
        if m is None:
            problems.append(f"{where}: rate {rate.strip()!r} not understood: speed_bps not read")
        elif up is not False and float(m.group(1)) > 0:
            out.append(Sample(ts, source, "speed_bps", float(m.group(1)) * 1e9))
    return out, problems


def unread_device_dirs(device_dir: Path, where: str) -> list[str]:
    """A device's counter directories this reader does not map: one problem line each, with how many files."""
    out = []
    for name, what in (("diag_counters", "mlx4 per-device QP error and overflow diagnostics, no canonical metric"),
                       ("hw_counters", "device-wide RDMA counters; each port's hw_counters/ is read")):
        try:
            files = [f for f in os.listdir(device_dir / name) if not f.startswith("clear")]
        except OSError:
            continue
        out.append(f"{where}: {name}/: {len(files)} counters not read ({what})")
    return out


def unread_ext(port_dir: Path, known: frozenset[str] | set[str]) -> list[str]:
    """``counters_ext/`` files that have no 32-bit twin to widen (unicast/multicast packets): vendor keys."""
    try:
        names = os.listdir(port_dir / "counters_ext")
    except OSError:
        return []
    return sorted(f"counters_ext/{n}" for n in names if n not in known)


def non_counts(port_dir: Path, read: set[str]) -> list[str]:
    """Files of a port's ``counters/`` and ``hw_counters/`` that were not read as a count (``N/A``, text)."""
    out = []
    for sub in ("counters", "hw_counters"):
        try:
            names = sorted(os.listdir(port_dir / sub))
        except OSError:
            continue
        out += [f"{sub}/{n}" for n in names if n not in read and (port_dir / sub / n).is_file()]
    return out
