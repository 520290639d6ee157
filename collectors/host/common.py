"""Small helpers shared by the host collectors: names, file reads, interface selection."""

from __future__ import annotations

import fnmatch
import os
import re
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path

_NON_WORD = re.compile(r"[^0-9a-zA-Z]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def default_host() -> str:
    return socket.gethostname().split(".", 1)[0]


def snake(name: str) -> str:
    """``rx_bytes.nic`` -> ``rx_bytes_nic``, ``PortXmitWait`` -> ``port_xmit_wait``."""
    return _NON_WORD.sub("_", _CAMEL.sub("_", name)).strip("_").lower()


def extra_counter(prefix: str, key: str) -> str:
    name = snake(key)
    return f"{prefix}_{name}" if name.endswith("_total") else f"{prefix}_{name}_total"


def read_text(path: str | Path) -> str | None:
    """File contents stripped, or None where the kernel refuses (EINVAL on a down link's speed)."""
    try:  # os-level calls: pathlib.read_text costs 3x more, and the agent reads ~30 files per NIC
        fd = os.open(path, os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 16):  # mountstats of a busy host exceeds 64 KiB
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None


def read_attr(path: str, dir_fd: int | None = None) -> str | None:
    """A sysfs attribute (``path`` relative to ``dir_fd`` when given), stripped, or None: one read()
    suffices (the kernel fills an attribute from a single page), which saves the EOF read that
    read_text needs for procfs files of any size."""
    try:
        fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        return os.read(fd, 8192).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_int(path: str | Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def select(names: Iterable[str], include: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """Names matching any ``include`` glob (all when empty) and no ``exclude`` glob, sorted."""
    out = []
    for name in names:
        if include and not any(fnmatch.fnmatchcase(name, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        out.append(name)
    return sorted(out)
