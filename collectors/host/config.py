"""The host agent's YAML configuration: validated by pydantic models of the file (unknown keys are
errors), then handed to the agent as the frozen dataclasses below. Errors name the field path."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from fabricscope.collectors.events import EventConfig, RateRule
from fabricscope.collectors.host.common import default_host
from fabricscope.collectors.validation import config_error
from fabricscope.core.errors import ConfigError

EthtoolMode = Literal["ioctl", "subprocess", "none"]


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
    ethtool: EthtoolMode = "ioctl"
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


# -- the YAML file's shape: one pydantic model per section; unknown keys are errors (typos) --------
PositiveSeconds = Annotated[float, Strict(), Field(gt=0)]
NonNegative = Annotated[float, Strict(), Field(ge=0)]
Names = tuple[Annotated[StrictStr, Field(min_length=1)], ...]


def _none_is_empty(value: Any) -> Any:
    return {} if value is None else value  # `nic:` with nothing under it means "all defaults"


_EMPTY = BeforeValidator(_none_is_empty)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SinkFile(_Section):
    url: StrictStr | None = None
    dsn: StrictStr | None = None
    token: StrictStr | None = None
    token_file: StrictStr | None = None
    spool_path: StrictStr | None = None
    spool_max_bytes: Annotated[int, Strict(), Field(gt=0)] = SinkConfig.spool_max_bytes
    batch_max: Annotated[int, Strict(), Field(gt=0)] = SinkConfig.batch_max
    flush_interval_s: PositiveSeconds = SinkConfig.flush_interval_s

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return url

    @model_validator(mode="after")
    def _one_target(self) -> _SinkFile:
        if (self.url is None) == (self.dsn is None):
            raise ValueError("give exactly one of sink.url (ingest API) or sink.dsn (database)")
        return self


class _NicFile(_Section):
    enabled: StrictBool = NicConfig.enabled
    interval_s: PositiveSeconds = NicConfig.interval_s
    include: Names = NicConfig.include
    exclude: Names = NicConfig.exclude
    ethtool: EthtoolMode = NicConfig.ethtool
    ethtool_binary: StrictStr = NicConfig.ethtool_binary
    extras: StrictBool = NicConfig.extras
    extras_interval_s: PositiveSeconds = NicConfig.extras_interval_s


class _RdmaFile(_Section):
    enabled: StrictBool = RdmaConfig.enabled
    interval_s: PositiveSeconds | None = None  # default: the NIC interval
    include: Names = RdmaConfig.include
    exclude: Names = RdmaConfig.exclude


class _StorageFile(_Section):
    enabled: StrictBool = StorageConfig.enabled
    interval_s: PositiveSeconds = StorageConfig.interval_s
    disks_include: Names = StorageConfig.disks_include
    disks_exclude: Names = StorageConfig.disks_exclude
    volumes: Names = StorageConfig.volumes


class _RuleFile(_Section):
    rate_per_s: NonNegative | None = None
    min_duration_s: NonNegative | None = None
    metrics: Names | None = None

    def over(self, rule: RateRule) -> RateRule:
        return replace(rule, rate_per_s=rule.rate_per_s if self.rate_per_s is None else self.rate_per_s,
                       min_duration_s=rule.min_duration_s if self.min_duration_s is None else self.min_duration_s,
                       metrics=rule.metrics if self.metrics is None else self.metrics)


class _EventsFile(_Section):
    pfc_storm: Annotated[_RuleFile, Field(default_factory=_RuleFile), _EMPTY]
    ecn_burst: Annotated[_RuleFile, Field(default_factory=_RuleFile), _EMPTY]
    link_flap: StrictBool = EventConfig.link_flap
    emit_open: StrictBool = EventConfig.emit_open


class _PathsFile(_Section):
    sys_root: StrictStr = str(AgentConfig.sys_root)
    proc_root: StrictStr = str(AgentConfig.proc_root)


class _AgentFile(_Section):
    host: StrictStr | None = None
    sink: Annotated[_SinkFile, _EMPTY]
    nic: Annotated[_NicFile, Field(default_factory=_NicFile), _EMPTY]
    rdma: Annotated[_RdmaFile, Field(default_factory=_RdmaFile), _EMPTY]
    storage: Annotated[_StorageFile, Field(default_factory=_StorageFile), _EMPTY]
    events: Annotated[_EventsFile, Field(default_factory=_EventsFile), _EMPTY]
    paths: Annotated[_PathsFile, Field(default_factory=_PathsFile), _EMPTY]


def parse_config(raw: Any) -> AgentConfig:
    try:
        f = _AgentFile.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        raise config_error(exc) from None
    s = f.sink
    token = s.token
    if s.token_file is not None:
        try:
            token = Path(s.token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"sink.token_file: cannot read {s.token_file}: {exc.strerror}") from exc
    sink = SinkConfig(url=s.url, dsn=s.dsn, token=token, spool_path=Path(s.spool_path) if s.spool_path else None,
                      spool_max_bytes=s.spool_max_bytes, batch_max=s.batch_max,
                      flush_interval_s=s.flush_interval_s)
    nic = NicConfig(**f.nic.model_dump())
    rdma_fields = f.rdma.model_dump()
    if rdma_fields["interval_s"] is None:
        rdma_fields["interval_s"] = nic.interval_s
    defaults = EventConfig()
    events = EventConfig(f.events.pfc_storm.over(defaults.pfc_storm), f.events.ecn_burst.over(defaults.ecn_burst),
                         f.events.link_flap, f.events.emit_open)
    return AgentConfig(host=f.host or default_host(), sink=sink, nic=nic, rdma=RdmaConfig(**rdma_fields),
                       storage=StorageConfig(**f.storage.model_dump()), events=events,
                       sys_root=Path(f.paths.sys_root), proc_root=Path(f.paths.proc_root))


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
