"""The host agent's YAML configuration, validated field by field (errors name the field)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fabricscope.core.errors import ConfigError
from fabricscope.collectors.events import EventConfig
from fabricscope.collectors.host.common import default_host

ETHTOOL_MODES = ("ioctl", "subprocess", "none")


@dataclass(frozen=True)
class SinkConfig:
    url: str | None = None
    dsn: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)  # never in reprs or logs
    spool_path: Path | None = None
    spool_max_bytes: int = 64 << 20
    batch_max: int = 5000
    flush_interval_s: float = 1.0


@dataclass(frozen=True)
class NicConfig:
    enabled: bool = True
    interval_s: float = 1.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ("lo",)
    ethtool: str = "ioctl"
    ethtool_binary: str = "ethtool"
    extras: bool = True
    extras_interval_s: float = 10.0


@dataclass(frozen=True)
class RdmaConfig:
    enabled: bool = True
    interval_s: float = 1.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class StorageConfig:
    enabled: bool = True
    interval_s: float = 5.0
    disks_include: tuple[str, ...] = ()
    disks_exclude: tuple[str, ...] = ("loop*", "ram*", "zram*", "sr*", "fd*")
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentConfig:
    host: str
    sink: SinkConfig
    nic: NicConfig = NicConfig()
    rdma: RdmaConfig = RdmaConfig()
    storage: StorageConfig = StorageConfig()
    events: EventConfig = EventConfig()
    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")


class _Fields:
    """Pops typed fields off one mapping; leftovers are unknown fields (typos), which are errors."""

    def __init__(self, raw: Any, where: str) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
        self.raw, self.where = dict(raw), where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = self.raw.pop(key, default)
        if value is default:
            return value
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise ConfigError(f"{self._name(key)}: expected {_kind(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise ConfigError(f"{self._name(key)}: expected {_kind(kind)}, got {value!r}")
        return value

    def positive(self, key: str, default: float) -> float:
        value = float(self.get(key, (int, float), default))
        if value <= 0:
            raise ConfigError(f"{self._name(key)}: must be > 0, got {value}")
        return value

    def strings(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(key, list, default)
        if not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{self._name(key)}: expected a list of non-empty strings")
        return tuple(value)

    def done(self) -> None:
        if self.raw:
            raise ConfigError(f"{self._name(sorted(self.raw)[0])}: unknown field")


def _kind(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"str": "a string", "int": "a number", "float": "a number", "bool": "true or false",
                        "list": "a list", "dict": "a mapping"}.get(k.__name__, k.__name__) for k in kinds)


def parse_config(raw: Any) -> AgentConfig:
    top = _Fields(raw, "")
    host = top.get("host", str, None) or default_host()

    s = _Fields(top.get("sink", dict, None), "sink")
    token = s.get("token", str, None)
    token_file = s.get("token_file", str, None)
    if token_file is not None:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"sink.token_file: cannot read {token_file}: {exc.strerror}") from exc
    spool = s.get("spool_path", str, None)
    sink = SinkConfig(url=s.get("url", str, None), dsn=s.get("dsn", str, None), token=token,
                      spool_path=Path(spool) if spool else None,
                      spool_max_bytes=int(s.positive("spool_max_bytes", 64 << 20)),
                      batch_max=int(s.positive("batch_max", 5000)),
                      flush_interval_s=s.positive("flush_interval_s", 1.0))
    s.done()
    if (sink.url is None) == (sink.dsn is None):
        raise ConfigError("sink: give exactly one of sink.url (ingest API) or sink.dsn (database)")
    if sink.url is not None and not sink.url.startswith(("http://", "https://")):
        raise ConfigError(f"sink.url: expected an http:// or https:// URL, got {sink.url!r}")

    n = _Fields(top.get("nic", dict, None), "nic")
    nic = NicConfig(enabled=n.get("enabled", bool, True), interval_s=n.positive("interval_s", 1.0),
                    include=n.strings("include", ()), exclude=n.strings("exclude", ("lo",)),
                    ethtool=n.get("ethtool", str, "ioctl"),
                    ethtool_binary=n.get("ethtool_binary", str, "ethtool"),
                    extras=n.get("extras", bool, True),
                    extras_interval_s=n.positive("extras_interval_s", 10.0))
    n.done()
    if nic.ethtool not in ETHTOOL_MODES:
        raise ConfigError(f"nic.ethtool: expected one of {', '.join(ETHTOOL_MODES)}, got {nic.ethtool!r}")

    r = _Fields(top.get("rdma", dict, None), "rdma")
    rdma = RdmaConfig(enabled=r.get("enabled", bool, True),
                      interval_s=r.positive("interval_s", nic.interval_s),
                      include=r.strings("include", ()), exclude=r.strings("exclude", ()))
    r.done()

    st = _Fields(top.get("storage", dict, None), "storage")
    storage = StorageConfig(enabled=st.get("enabled", bool, True), interval_s=st.positive("interval_s", 5.0),
                            disks_include=st.strings("disks_include", ()),
                            disks_exclude=st.strings("disks_exclude", StorageConfig.disks_exclude),
                            volumes=st.strings("volumes", ()))
    st.done()

    events = EventConfig.from_mapping(top.get("events", dict, None))
    p = _Fields(top.get("paths", dict, None), "paths")
    sys_root = Path(p.get("sys_root", str, "/sys"))
    proc_root = Path(p.get("proc_root", str, "/proc"))
    p.done()
    top.done()
    return AgentConfig(host, sink, nic, rdma, storage, events, sys_root, proc_root)


def load_config(path: Path) -> AgentConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_config(raw)
