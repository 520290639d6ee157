"""What fabricscope would read from a recorded output: one registry of input formats.

Each parser module that reads a device or tool output declares its formats as data, a tuple
``FORMATS`` of :class:`Format`, and lists its module in ``MODULES`` below. ``fabricscope parse``
(:mod:`.cli`) loads them, sniffs the format of a file or directory when none is named, and prints
what it read. A module whose extra is not installed is skipped and reported, never a traceback.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fabricscope.core.errors import ParseError
from fabricscope.core.model import Event, Link, Sample

# Modules that declare ``FORMATS``; add yours here (one line each, kept sorted).
MODULES = (
    "fabricscope.collectors.host.gpu",
    "fabricscope.collectors.host.nccl_ras",
    "fabricscope.collectors.host.nic",
    "fabricscope.collectors.host.pcie_formats",
    "fabricscope.collectors.host.pressure",
    "fabricscope.collectors.host.rdma",
    "fabricscope.collectors.host.storage",
    "fabricscope.collectors.host.tcp",
    "fabricscope.collectors.switch.gnmi.formats",
    "fabricscope.collectors.switch.infiniband.formats",
    "fabricscope.collectors.switch.netconf.formats",
    "fabricscope.collectors.switch.snmp.formats",
    "fabricscope.collectors.training.importers.formats",
)
# Metric name prefixes of vendor keys kept verbatim (``common.extra_counter``): not canonical output.
EXTRA_PREFIXES = ("ethtool_", "netdev_", "lustre_")
# Bytes of a file handed to the sniffers: enough for any header we recognise a format by.
HEAD_BYTES = 64 * 1024


@dataclass
class Reading:
    """What a parser read from one recorded output."""

    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)  # vendor keys seen but not mapped to a metric
    problems: list[str] = field(default_factory=list)  # malformed parts skipped
    guesses: list[str] = field(default_factory=list)  # each guess made (driver, resource, layout), and how to confirm it

    @property
    def items(self) -> int:
        return len(self.samples) + len(self.events) + len(self.links)


@dataclass(frozen=True)
class Format:
    """An input format. ``sniff(path, head)`` says whether ``path`` looks like it (``head``: the
    file's first bytes as text, "" for a directory); ``read(path, device, ts, **options)`` parses it
    (pure apart from reading ``path``) or raises ParseError. ``options`` names the keyword options the
    reader takes (from :data:`OPTIONS`); one given on the command line confirms what would otherwise be
    a guess."""

    name: str
    description: str
    sniff: Callable[[Path, str], bool]
    read: Callable[..., Reading]
    directory: bool = False  # the input is a directory tree, not a file
    # Sniff order among formats that could both match: lower first (specific before generic).
    priority: int = 100
    options: tuple[str, ...] = ()


# Options a format may declare (``fabricscope parse --<name>``), with their help text.
OPTIONS: dict[str, str] = {
    "driver": "NIC driver whose mapping table reads ethtool -S (as /sys/class/net/IF/device/driver names it)",
    "resource": "PSI resource of the file: cpu, io or memory",
    "cgroup": "cgroup the PSI file belongs to (labels its samples; host pressure when omitted)",
}


@dataclass
class Registry:
    formats: dict[str, Format] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # module -> missing dependency

    def get(self, name: str) -> Format:
        try:
            return self.formats[name]
        except KeyError:
            known = ", ".join(sorted(self.formats))
            hint = f" (not loaded: {', '.join(f'{m} needs {d}' for m, d in self.unavailable.items())})" \
                if self.unavailable else ""
            raise ParseError(f"unknown format {name!r}; known: {known}{hint}") from None

    def sniff(self, path: Path) -> Format | None:
        # Sniffers see the text from its first non-blank line: a paste, a heredoc or a string literal
        # often starts with an empty line, and a format recognised by its first line must not vanish for it.
        head = "" if path.is_dir() else _LEADING_BLANK_LINES.sub("", read_head(path))
        for fmt in sorted(self.formats.values(), key=lambda f: (f.priority, f.name)):
            if fmt.directory != path.is_dir():
                continue
            try:
                if fmt.sniff(path, head):
                    return fmt
            except (OSError, ValueError):
                continue  # a sniffer that cannot look is a "no"
        return None

    def also(self, path: Path, chosen: Format) -> list[Format]:
        """The other formats whose sniffer takes ``path`` too (a whole /sys holds class/net, class/infiniband
        and PCI links): sniffing chose ``chosen`` among them, which a caller must say."""
        head = "" if path.is_dir() else _LEADING_BLANK_LINES.sub("", read_head(path))
        out = []
        for fmt in sorted(self.formats.values(), key=lambda f: (f.priority, f.name)):
            if fmt is chosen or fmt.directory != path.is_dir():
                continue
            try:
                if fmt.sniff(path, head):
                    out.append(fmt)
            except (OSError, ValueError):
                continue
        return out


_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")


def read_head(path: Path) -> str:
    with path.open("rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def load(modules: Iterable[str] = MODULES) -> Registry:
    reg = Registry()
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] == "fabricscope":
                raise
            reg.unavailable[name] = exc.name or "?"
            continue
        for fmt in getattr(mod, "FORMATS", ()):
            if fmt.name in reg.formats:
                raise ValueError(f"format {fmt.name!r} declared twice ({name})")
            reg.formats[fmt.name] = fmt
    return reg
