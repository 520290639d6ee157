"""The YAML topology format: the JSON of ``PUT /v1/topology`` written as YAML, plus a shorthand.

Shorthand: a device may list ``links`` of its own interfaces: ``{mlx5_0: leaf1:Ethernet1}`` becomes a
link ``node01:mlx5_0`` ↔ ``leaf1:Ethernet1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fabricscope.core.errors import ConfigError
from fabricscope.service.schemas import Topology


def load_topology(path: Path) -> Topology:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with 'devices' and 'links'")
    links: list[dict[str, Any]] = list(raw.get("links") or [])
    for d in raw.get("devices") or []:
        if isinstance(d, dict) and isinstance(d.get("links"), dict):
            for itf, peer in d.pop("links").items():
                links.append({"a": f"{d.get('name')}:{itf}", "b": str(peer), "speed_bps": d.get("speed_bps")})
    raw["links"] = links
    try:
        return Topology.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']}") from exc
