"""The host agent's YAML configuration: frozen pydantic models of the file's sections (unknown keys
are errors, types are strict), which the agent reads as they are. Errors name the field path. Only
the sink section is turned into something else: its ``token_file`` is read into ``SinkConfig.token``."""

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
from fabricscope.collectors.sinks.factory import HTTP_SCHEMES, NATS_SCHEMES, scheme_of
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
    def _api_or_bus(cls, url: str | None) -> str | None:
        if url is not None and scheme_of(url) not in HTTP_SCHEMES | NATS_SCHEMES:
            raise ValueError("expected an http(s):// URL (the ingest API) or a nats:// URL (the bus)")
        return url

    @model_validator(mode="after")
    def _one_target(self) -> _SinkFile:
        if (self.url is None) == (self.dsn is None):
            raise ValueError("give exactly one of sink.url (ingest API) or sink.dsn (database)")
        return self


class NicConfig(_Section):
    enabled: StrictBool = True
    interval_s: PositiveSeconds = 1.0
    include: Names = ()
    exclude: Names = ("lo",)
    ethtool: EthtoolMode = "ioctl"
    ethtool_binary: StrictStr = "ethtool"
    extras: StrictBool = True
    extras_interval_s: PositiveSeconds = 10.0


class RdmaConfig(_Section):
    enabled: StrictBool = True
    interval_s: PositiveSeconds | None = None  # None: the NIC's (parse_config fills it in)
    include: Names = ()
    exclude: Names = ()


class StorageConfig(_Section):
    enabled: StrictBool = True
    interval_s: PositiveSeconds = 5.0
    disks_include: Names = ()
    disks_exclude: Names = ("loop*", "ram*", "zram*", "sr*", "fd*")
    volumes: Names = ()


class GpuConfig(_Section):
    """GPUs (#17): NVML in-process, or a dcgm-exporter's /metrics. Off by itself where NVML is absent."""
    enabled: StrictBool = True
    interval_s: PositiveSeconds = 5.0
    source: Literal["nvml", "dcgm", "smi"] = "nvml"  # smi: run `nvidia-smi -q -x` (no Python bindings)
    dcgm_url: StrictStr = "http://127.0.0.1:9400/metrics"
    dcgm_timeout_s: PositiveSeconds = 5.0  # also nvidia-smi's time limit with source: smi
    smi_binary: StrictStr = "nvidia-smi"


# -- host pressure and TCP (#17): one block -----------------------------------------------------
class TcpConfig(_Section):
    enabled: StrictBool = True
    interval_s: PositiveSeconds = 1.0
    softnet: StrictBool = True  # /proc/net/softnet_stat backlog drops and time squeezes


class PressureConfig(_Section):
    enabled: StrictBool = True
    interval_s: PositiveSeconds = 1.0
    cgroups: Names = ()  # globs under the cgroup v2 root, e.g. system.slice/slurmstepd.scope/job_*
    cgroup_root: StrictStr | None = None  # None: the cgroup2 mount in /proc/mounts, else <sys_root>/fs/cgroup
    thermal: StrictBool = True
    thermal_interval_s: PositiveSeconds = 10.0
# -- end host pressure and TCP ------------------------------------------------------------------


class InspectorConfig(_Section):
    """NCCL Inspector live (#45): tail the plugin's output directory, send its records as collectives."""
    enabled: StrictBool = False
    dir: StrictStr | None = None  # NCCL_INSPECTOR_DUMP_DIR, or the directory holding one per job
    job: StrictStr | None = None  # None: the job is the sub-directory a file is in (nccl-inspector-<id>)
    interval_s: PositiveSeconds = 2.0
    files: Names = ("*.log", "*/*.log")  # globs under dir; the plugin writes <hostname>-pid<pid>.log
    file_hosts: Names = ()  # a shared dir: read only the files of these hostnames; () reads every file
    state_path: StrictStr | None = None  # None: <sink.spool_path>.inspector-offsets.json
    max_bytes_per_poll: Annotated[int, Strict(), Field(gt=0)] = 4 << 20
    max_line_bytes: Annotated[int, Strict(), Field(gt=0)] = 1 << 20
    placement: StrictBool = True  # register each rank with this host (PUT /v1/jobs/{job})

    @model_validator(mode="after")
    def _dir_when_enabled(self) -> InspectorConfig:
        if self.enabled and not self.dir:
            raise ValueError("nccl_inspector.dir is required when nccl_inspector.enabled is true")
        return self


class NcclRasConfig(_Section):
    """NCCL RAS (#45 item 4): query the RAS port of the NCCL jobs on this host, post what it says as events."""
    enabled: StrictBool = False
    addr: StrictStr = "127.0.0.1:28028"  # the jobs' NCCL_RAS_ADDR
    interval_s: PositiveSeconds = 30.0
    timeout_s: PositiveSeconds = 15.0  # the whole exchange, connect to the report's last byte
    collect_timeout_s: Annotated[int, Strict(), Field(ge=0, le=3600)] = 5  # sent as TIMEOUT: RAS's wait for peers
    format: Literal["auto", "json", "text"] = "auto"  # auto: JSON where NCCL has it (2.28.7+), else text
    verbose: StrictBool = False  # VERBOSE STATUS: more outlier ranks listed
    job: StrictStr | None = None  # None: events without a job; the service matches them by this host

    @field_validator("addr")
    @classmethod
    def _host_port(cls, addr: str) -> str:
        host, sep, port = addr.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected host:port (NCCL_RAS_ADDR's form), e.g. 127.0.0.1:28028")
        return addr

    @model_validator(mode="after")
    def _deadline_after_collection(self) -> NcclRasConfig:
        if self.timeout_s <= self.collect_timeout_s:
            raise ValueError("nccl_ras.timeout_s must be longer than collect_timeout_s (RAS's own wait)")
        return self


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
    sys_root: StrictStr = "/sys"
    proc_root: StrictStr = "/proc"


@dataclass(frozen=True)
class AgentConfig:
    host: str
    sink: SinkConfig
    nic: NicConfig = NicConfig()
    rdma: RdmaConfig = RdmaConfig()
    storage: StorageConfig = StorageConfig()
    gpu: GpuConfig = GpuConfig()
    events: EventConfig = EventConfig()
    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    tcp: TcpConfig = TcpConfig()  # host pressure and TCP (#17)
    pressure: PressureConfig = PressureConfig()
    nccl_inspector: InspectorConfig = InspectorConfig()
    nccl_ras: NcclRasConfig = NcclRasConfig()


class _AgentFile(_Section):
    host: StrictStr | None = None
    sink: Annotated[_SinkFile, _EMPTY]
    nic: Annotated[NicConfig, Field(default_factory=NicConfig), _EMPTY]
    rdma: Annotated[RdmaConfig, Field(default_factory=RdmaConfig), _EMPTY]
    storage: Annotated[StorageConfig, Field(default_factory=StorageConfig), _EMPTY]
    gpu: Annotated[GpuConfig, Field(default_factory=GpuConfig), _EMPTY]
    events: Annotated[_EventsFile, Field(default_factory=_EventsFile), _EMPTY]
    paths: Annotated[_PathsFile, Field(default_factory=_PathsFile), _EMPTY]
    tcp: Annotated[TcpConfig, Field(default_factory=TcpConfig), _EMPTY]  # host pressure and TCP (#17)
    pressure: Annotated[PressureConfig, Field(default_factory=PressureConfig), _EMPTY]
    nccl_inspector: Annotated[InspectorConfig, Field(default_factory=InspectorConfig), _EMPTY]
    nccl_ras: Annotated[NcclRasConfig, Field(default_factory=NcclRasConfig), _EMPTY]


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
    rdma = f.rdma if f.rdma.interval_s is not None else f.rdma.model_copy(update={"interval_s": f.nic.interval_s})
    defaults = EventConfig()
    events = EventConfig(f.events.pfc_storm.over(defaults.pfc_storm), f.events.ecn_burst.over(defaults.ecn_burst),
                         f.events.link_flap, f.events.emit_open)
    return AgentConfig(host=f.host or default_host(), sink=sink, nic=f.nic, rdma=rdma, storage=f.storage,
                       gpu=f.gpu, events=events,
                       sys_root=Path(f.paths.sys_root), proc_root=Path(f.paths.proc_root),
                       tcp=f.tcp, pressure=f.pressure,  # host pressure and TCP (#17)
                       nccl_inspector=f.nccl_inspector, nccl_ras=f.nccl_ras)


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
