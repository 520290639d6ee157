"""Device inventory: which switches to poll, how, and with which credentials (by reference).

Secrets never live in the YAML: a credential names an environment variable (``env:``) or a file
(``file:``) and is resolved at load time into a :class:`pydantic.SecretStr`, so it never shows in a
repr, a log line or a validation error. Every validation problem becomes a ``ConfigError`` whose
message names the offending field (``devices[3].snmp.port``).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from fabricscope.collectors.validation import config_error
from fabricscope.core.errors import ConfigError

Protocol = Literal["snmp", "netconf", "gnmi", "infiniband"]


class SecretRef(BaseModel):
    """Where a secret lives. Exactly one of ``env`` / ``file``; the value is read at load time."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env: str | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' or 'file' (inline secrets are not accepted)")
        return self

    def resolve(self) -> SecretStr:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise ValueError(f"environment variable {self.env} is not set")
            return SecretStr(value)
        assert self.file is not None
        try:
            return SecretStr(self.file.read_text().strip())
        except OSError as exc:
            raise ValueError(f"cannot read secret file {self.file}: {exc.strerror}") from exc


def _secret(ref: SecretRef | None) -> SecretStr | None:
    return None if ref is None else ref.resolve()


class SnmpV3(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str
    auth_protocol: Literal["sha", "sha224", "sha256", "sha384", "sha512", "md5"] = "sha"
    auth_key: SecretRef
    priv_protocol: Literal["aes", "aes192", "aes256", "des"] = "aes"
    priv_key: SecretRef


class SnmpSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int = Field(161, ge=1, le=65535)
    version: Literal["2c", "3"] = "2c"
    community: SecretRef | None = None
    v3: SnmpV3 | None = None
    max_repetitions: int = Field(25, ge=1, le=200)
    retries: int = Field(1, ge=0, le=10)

    @model_validator(mode="after")
    def _auth(self) -> SnmpSettings:
        if self.version == "2c" and self.community is None:
            raise ValueError("version 2c needs 'community'")
        if self.version == "3" and self.v3 is None:
            raise ValueError("version 3 needs 'v3' (user, auth_key, priv_key: authPriv)")
        return self


class NetconfSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int = Field(830, ge=1, le=65535)
    username: str
    password: SecretRef | None = None
    key_file: Path | None = None
    hostkey_verify: bool = True
    known_hosts: Path | None = None


class GnmiSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int = Field(9339, ge=1, le=65535)
    username: str | None = None
    password: SecretRef | None = None
    tls: bool = True
    ca_file: Path | None = None
    server_name: str | None = None
    encoding: Literal["json_ietf", "json", "proto"] = "json_ietf"


class InfinibandSettings(BaseModel):
    """A fabric sweep from this management host (``address`` is unused; the HCA is local)."""

    model_config = ConfigDict(extra="forbid")
    ca: str | None = None  # HCA to send MADs from (-C); default: the tools' first
    ca_port: int | None = Field(None, ge=1, le=255)  # its port (-P)
    max_mads_per_second: float = Field(200.0, gt=0)
    sweep_deadline: float = Field(20.0, gt=0)  # seconds; ports not reached are read next sweep
    topology_every: int = Field(30, ge=1)  # run ibnetdiscover every N sweeps (and on the first)


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    address: str = Field(min_length=1)
    protocols: list[Protocol] = Field(min_length=1)
    interval: float = Field(10.0, gt=0)
    timeout: float = Field(5.0, gt=0)
    vendor: str | None = None
    model: str | None = None
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    lldp: bool = True
    snmp: SnmpSettings | None = None
    netconf: NetconfSettings | None = None
    gnmi: GnmiSettings | None = None
    infiniband: InfinibandSettings | None = None

    @field_validator("vendor")
    @classmethod
    def _lower(cls, v: str | None) -> str | None:
        return v.lower() if v else v

    @model_validator(mode="after")
    def _settings_for_protocols(self) -> Device:
        for proto in self.protocols:
            if getattr(self, proto) is None:
                raise ValueError(f"protocol {proto!r} listed but no '{proto}:' settings block")
        if self.timeout >= self.interval:
            raise ValueError("timeout must be shorter than interval")
        if self.infiniband is not None and self.infiniband.sweep_deadline >= self.timeout:
            raise ValueError("infiniband.sweep_deadline must be shorter than timeout")
        return self

    def wants(self, interface: str) -> bool:
        """Interface filter: shell globs; include (default all) then exclude."""
        if self.include and not any(fnmatch.fnmatchcase(interface, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(interface, p) for p in self.exclude)

    def secret(self, ref: SecretRef | None) -> SecretStr | None:
        return _secret(ref)


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    devices: list[Device]

    @model_validator(mode="after")
    def _unique(self) -> Inventory:
        seen: set[str] = set()
        for i, d in enumerate(self.devices):
            if d.name in seen:
                raise ValueError(f"devices[{i}].name: duplicate device name {d.name!r}")
            seen.add(d.name)
        return self


def _resolve_all(inv: Inventory) -> None:
    """Read every referenced secret now so a missing one fails at load, naming the field."""
    for i, d in enumerate(inv.devices):
        refs: dict[str, SecretRef | None] = {}
        if d.snmp:
            refs["snmp.community"] = d.snmp.community
            if d.snmp.v3:
                refs["snmp.v3.auth_key"] = d.snmp.v3.auth_key
                refs["snmp.v3.priv_key"] = d.snmp.v3.priv_key
        if d.netconf:
            refs["netconf.password"] = d.netconf.password
        if d.gnmi:
            refs["gnmi.password"] = d.gnmi.password
        for field_name, ref in refs.items():
            if ref is None:
                continue
            try:
                ref.resolve()
            except ValueError as exc:
                raise ConfigError(f"devices[{i}].{field_name}: {exc}") from None


def parse_inventory(data: Any, origin: str = "inventory") -> Inventory:
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, origin) from None  # names the field, never the value (a pasted secret)
    _resolve_all(inv)
    return inv


def load_inventory(path: Path) -> Inventory:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read inventory: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_inventory(data, str(path))
